#!/usr/bin/env python3
"""The training thread's time in save(): the entry list reused from the last save
against the list built anew at every save, interleaved in the same run.

    PYTHONPATH=build/python python experiments/torch/bench_save_call.py [--device cpu|cuda]
        [--saves 60] [--json FILE]

Two registrations, each measured both ways, save by save in turn:
  model    a transformer with AdamW (experiments/torch/gpu_roundtrip.py's, 12
           layers of width 128: 596 tensors), registered as ck.register(model, opt);
  named    320 tensors registered by name (bench_gpu.py's registration).
"reused" is save() as it runs: the registered objects walk to the same tensors
(memento._entry_cache), so the last list is reused; "rebuilt" forgets that list
before each save, as every save did before the cache. Figures are medians of
--saves saves after 5 of warm-up, each timed around ck.save() alone (ck.wait()
follows outside the timing); ratio = reused / rebuilt. Prints one line
"BENCH_SAVE_CALL {json}" (also written to --json).
"""
import argparse
import contextlib
import json
import os
import statistics
import sys
import time
import uuid

import torch

import memento

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpu_roundtrip import Gpt  # noqa: E402


def model_job(device):
    torch.manual_seed(0)
    model = Gpt(512, 128, 4, 12, 64).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x = torch.randint(0, 512, (2, 64), device=device)
    model(x).sum().backward()
    opt.step()
    return (model, opt), {}


def named_job(device):
    gen = torch.Generator().manual_seed(0)
    tensors = [torch.randn(1001 + 2 * i, generator=gen).to(device) for i in range(320)]
    return (), {"t%03d" % i: t for i, t in enumerate(tensors)}


@contextlib.contextmanager
def registered(make, device, prefix):
    """A one-rank Checkpointer of a fresh job with make(device)'s registration."""
    objects, named = make(device)
    job = "%s-%d-%s" % (prefix, os.getpid(), uuid.uuid4().hex[:6])
    with memento.Checkpointer(job=job, launcher="single", scheme="none", slots=2,
                              persist_every=0) as ck:
        ck.register(*objects, **named)
        assert ck.restore() is None
        yield ck


def measure(make, device, saves):
    times = {"reused": [], "rebuilt": []}
    with registered(make, device, "bench-save-call") as ck:
        entries = len(ck.tensors())
        step = 0
        for i in range(2 * (saves + 5)):
            way = "rebuilt" if i % 2 else "reused"
            if way == "rebuilt":
                ck._cache.clear()
            if device == "cuda":
                torch.cuda.synchronize()
            step += 1
            t0 = time.perf_counter()
            ck.save(step)
            times[way].append(time.perf_counter() - t0)
            ck.wait()
        hits = ck._cache.hits
    reused = statistics.median(times["reused"][5:])
    rebuilt = statistics.median(times["rebuilt"][5:])
    return {"entries": entries, "reused_ms": round(reused * 1e3, 3),
            "rebuilt_ms": round(rebuilt * 1e3, 3), "ratio": round(reused / rebuilt, 3),
            "cache_hits": hits}


def run_both(description, count_name, count_default, measure, describe, tag):
    """The command line of this bench and bench_restore_call.py: measures both
    registrations, prints describe(name, result) for each and one line "TAG {json}"."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--" + count_name, type=int, default=count_default)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.device == "cuda":
        torch.cuda.set_device(0)
    count = getattr(args, count_name)
    out = {"device": args.device, "torch": torch.__version__, count_name: count}
    for name, make in (("model", model_job), ("named", named_job)):
        out[name] = measure(make, args.device, count)
        print(describe(name, out[name]))
    line = json.dumps(out, sort_keys=True)
    print(tag + " " + line)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")


def main():
    run_both(__doc__.splitlines()[0], "saves", 60, measure,
             lambda name, r: "%-6s %4d entries: save() %.3f ms reused, %.3f ms rebuilt: %.3f"
             % (name, r["entries"], r["reused_ms"], r["rebuilt_ms"], r["ratio"]),
             "BENCH_SAVE_CALL")


if __name__ == "__main__":
    main()
