#!/usr/bin/env python3
"""restore()'s own cost (small tensors: what a restore costs besides moving bytes): the
report's JSON made when asked for against made at every restore, interleaved in the
same run.

    PYTHONPATH=build/python python experiments/torch/bench_restore_call.py [--device cpu|cuda]
        [--restores 40] [--json FILE]

The registrations of bench_save_call.py: a transformer with AdamW (596 tensors) and 320
tensors by name. "lazy" is ck.restore() as it runs: the report's `json` (the engine's
whole recovery report) is made only when read; "eager" reads report.json right after
each restore, the work every restore did before. Medians of --restores restores after 3
of warm-up, each restoring the committed version from this rank's node store; ratio =
lazy / eager. Prints one line "BENCH_RESTORE_CALL {json}" (also written to --json).
"""
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_save_call import registered, run_both  # noqa: E402


def measure(make, device, restores):
    times = {"lazy": [], "eager": []}
    with registered(make, device, "bench-restore-call") as ck:
        ck.save(1)
        ck.wait()
        entries = len(ck.tensors())
        json_bytes = 0
        for i in range(2 * (restores + 3)):
            way = "eager" if i % 2 else "lazy"
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            report = ck.restore()
            if way == "eager":
                json_bytes = len(report.json)
            if device == "cuda":
                torch.cuda.synchronize()
            times[way].append(time.perf_counter() - t0)
            assert int(report) == 1
    lazy = statistics.median(times["lazy"][3:])
    eager = statistics.median(times["eager"][3:])
    return {"entries": entries, "lazy_ms": round(lazy * 1e3, 3), "eager_ms": round(eager * 1e3, 3),
            "ratio": round(lazy / eager, 3), "json_bytes": json_bytes}


def main():
    run_both(__doc__.splitlines()[0], "restores", 40, measure,
             lambda name, r: "%-6s %4d entries: restore() %.3f ms with the JSON on demand, "
             "%.3f ms with it made (%d bytes): %.3f" % (name, r["entries"], r["lazy_ms"],
                                                       r["eager_ms"], r["json_bytes"],
                                                       r["ratio"]),
             "BENCH_RESTORE_CALL")


if __name__ == "__main__":
    main()
