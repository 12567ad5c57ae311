"""Shared fixtures: a unique MEMENTO_JOB per test and removal of its segments."""
import glob
import os
import sys
import uuid

import pytest

# The tests share helpers by module name (test_checkpointer, conftest) under any
# import mode; the memento package comes from the build tree when
# MEMENTO_TEST_PYTHON_PATH names it (ctest), else from the environment (installed).
HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.append(HERE)
BUILD_PYTHON = os.environ.get("MEMENTO_TEST_PYTHON_PATH")
if BUILD_PYTHON and BUILD_PYTHON not in sys.path:
    sys.path.insert(0, BUILD_PYTHON)


def remove_segments(job):
    for path in glob.glob("/dev/shm/memento.%s.*" % job):
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


@pytest.fixture
def job():
    name = "py-%d-%s" % (os.getpid(), uuid.uuid4().hex[:8])
    yield name
    remove_segments(name)


@pytest.fixture(autouse=True)
def reopening_resumes(request, monkeypatch):
    """Most tests stand for a relaunch of a job by opening it again after close(), which
    ends a run normally (finished: not resumed, its node stores freed). They run with
    finished runs kept and resumed, as a relaunch after a crash is (MEMENTO_KEEP_FINISHED=1,
    MEMENTO_RESUME_FINISHED=1, inherited by the jobs they start); a module that sets
    FINISHED_RUN_DEFAULTS = True runs with the defaults (test_finished_run.py)."""
    if getattr(request.module, "FINISHED_RUN_DEFAULTS", False):
        monkeypatch.delenv("MEMENTO_KEEP_FINISHED", raising=False)
        monkeypatch.delenv("MEMENTO_RESUME_FINISHED", raising=False)
        return
    monkeypatch.setenv("MEMENTO_KEEP_FINISHED", "1")
    monkeypatch.setenv("MEMENTO_RESUME_FINISHED", "1")
