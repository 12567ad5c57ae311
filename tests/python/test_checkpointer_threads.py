"""memento's Python Checkpointer used from two threads at once (a watchdog beside the
training thread): close() during a save, the getters while saves re-register. Each runs as
a script of its own, so that a crash fails the test instead of ending pytest."""
import os
import subprocess
import sys


def run_apart(tmp_path, name, source, job, timeout):
    """Runs `source` as a script of its own with `job` as its argument (a crash there fails
    the calling test instead of ending pytest); its standard output."""
    script = tmp_path / name
    script.write_text(source)
    out = subprocess.run([sys.executable, str(script), job], capture_output=True, text=True,
                         timeout=timeout, env=dict(os.environ))
    assert out.returncode == 0, "exit %d\n%s%s" % (out.returncode, out.stdout, out.stderr)
    return out.stdout


def test_close_from_another_thread_waits_for_the_save_in_flight(job, tmp_path):
    """A watchdog thread closes the checkpointer while the training thread is inside save():
    close() returns after that save, every later save() raises FailedPreconditionError, and
    the process never touches a destroyed checkpointer (run apart: a crash fails the test)."""
    out = run_apart(tmp_path, "close_during_save.py", (
        "import sys, threading, time, torch, memento\n"
        "ck = memento.Checkpointer(job=sys.argv[1])\n"
        "ck.register('t', torch.ones(128 << 20, dtype=torch.uint8))\n"
        "class Entering:\n"
        "    # Says when the third save enters the engine: that save waits there for\n"
        "    # the second one's commit while the main thread closes.\n"
        "    def __init__(self, impl):\n"
        "        self._impl, self.third = impl, threading.Event()\n"
        "    def __getattr__(self, name):\n"
        "        return getattr(self._impl, name)\n"
        "    def save(self, step):\n"
        "        if step == 3: self.third.set()\n"
        "        self._impl.save(step)\n"
        "ck._impl = entering = Entering(ck._impl)\n"
        "events = []\n"
        "def train():\n"
        "    step = 0\n"
        "    try:\n"
        "        while step < 100000:\n"
        "            step += 1\n"
        "            ck.save(step)\n"
        "            events.append(('saved', time.monotonic()))\n"
        "    except memento.FailedPreconditionError as e:\n"
        "        events.append(('refused', str(e)))\n"
        "trainer = threading.Thread(target=train)\n"
        "trainer.start()\n"
        "entering.third.wait()\n"
        "ck.close()\n"
        "closed = time.monotonic()\n"
        "trainer.join()\n"
        "saved = [e[1] for e in events if e[0] == 'saved']\n"
        "assert len(saved) >= 2, events\n"
        "assert events[-1][0] == 'refused' and 'closed' in events[-1][1], events[-1]\n"
        "assert saved[-1] <= closed, 'a save returned after close() had returned'\n"
        "print('saves', len(saved))\n"), job, timeout=120)
    assert out.startswith("saves "), out


def test_getters_from_another_thread_while_saves_re_register(job, tmp_path):
    """A watchdog polls the getters while every save() of the training thread re-registers
    (a reallocated storage makes a new engine): each call returns a real value, never one
    read from an engine being replaced (run apart: a crash fails the test); then the watchdog
    and the main thread close() at once, and a getter afterwards answers its last value."""
    out = run_apart(tmp_path, "poll_during_reregistration.py", (
        "import sys, threading, torch, memento\n"
        "ck = memento.Checkpointer(job=sys.argv[1], slots=2)\n"
        "w = torch.nn.Parameter(torch.ones(1 << 20))\n"
        "ck.register('w', w)\n"
        "stop, seen, errors, nodes = threading.Event(), set(), [], {}\n"
        "def poll():\n"
        "    try:\n"
        "        while not stop.is_set():\n"
        "            v = ck.latest_committed()\n"
        "            assert v is None or 1 <= v <= 40, v\n"
        "            names = ck.entry_names()\n"
        "            assert names == [] or names[0] == 'w', names\n"
        "            assert ck.protection_state() in ('protected', 're-protecting'), ck.protection_state()\n"
        # The node is published when save(1) returns, and v1 can commit before that;
        # from v2 on it is known, and it never changes (not even while re-registering).
        "            node = ck.node\n"
        "            assert node or v in (None, 1), 'no node after v%d' % v\n"
        "            assert not node or nodes.setdefault('first', node) == node, (node, nodes)\n"
        "            ck.interval_stats(); ck.blocked_seconds()\n"
        "            seen.add(v)\n"
        "    except Exception as e:\n"
        "        errors.append(repr(e))\n"
        "watchdog = threading.Thread(target=poll)\n"
        "watchdog.start()\n"
        "for step in range(1, 41):\n"
        "    w.data = w.data.clone()  # a new storage: this save re-registers\n"
        "    ck.save(step)\n"
        "ck.wait()\n"
        "stop.set(); watchdog.join()\n"
        "assert not errors, errors\n"
        "assert ck.reregistrations() >= 30, ck.reregistrations()\n"
        "assert len(seen) >= 2, seen\n"
        "assert ck.node and nodes.get('first') == ck.node, (nodes, ck.node)\n"
        "other = threading.Thread(target=ck.close)\n"
        "other.start(); ck.close(); other.join()\n"
        "assert ck.latest_committed() == 40, ck.latest_committed()\n"
        "print('polled', max(x for x in seen if x is not None))\n"), job, timeout=300)
    assert out.startswith("polled "), out
