"""scripts/gpu-check on the machine it runs on, reusing the ctest build: every step
reports, the CUDA tests say whether they ran or were skipped, the round trip and the
benchmark give their results, and the report is written; a missing dependency is named."""
import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "gpu-check")
BUILD = os.environ.get("MEMENTO_BUILD_DIR")
# The round trip and the benchmark end their runs normally: with the defaults their node
# stores are unlinked at close, not kept for a relaunch (conftest's reopening_resumes).
FINISHED_RUN_DEFAULTS = True


def summary(out):
    steps = {}
    with open(os.path.join(out, "summary.txt")) as f:
        for line in f:
            name, rc, rest = (line.rstrip("\n").split(" ", 2) + [""])[:3]
            steps[name] = (int(rc[3:]), rest)
    return steps


@pytest.mark.skipif(not BUILD, reason="MEMENTO_BUILD_DIR (the ctest build tree) is not set")
def test_a_run_on_the_existing_build_reports_every_step(tmp_path):
    out = tmp_path / "out"
    run = subprocess.run([SCRIPT, "--python", sys.executable, "--build-dir", BUILD,
                          "--reuse-build", "--out", str(out)],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    steps = summary(out)
    for name in ("env", "build", "tests.engine_cuda", "tests.engine_cuda_other_device",
                 "tests.torch_cuda", "tests.python_cuda", "roundtrip", "bench", "report"):
        assert name in steps, "no %s step in %s" % (name, steps)
        assert steps[name][0] == 0, (name, steps[name])
    gpu = torch.cuda.is_available()
    # The NCCL link's two-rank test: built where configure found nccl.h.
    nccl = steps["tests.nccl_link_np2"]
    if os.path.exists(os.path.join(BUILD, "tests", "cuda", "memento_cuda_nccl_tests")):
        assert nccl[0] == 0 and "failed=0" in nccl[1], nccl
        assert ("skipped=0" if gpu else "passed=0 failed=0 skipped=2") in nccl[1], nccl
    else:
        assert nccl[0] == 127 and "no nccl.h" in nccl[1], nccl
    engine = steps["tests.engine_cuda"][1]
    # Every CUDA test either ran or reported itself skipped; none failed.
    assert "failed=0" in engine and ("skipped=0" if gpu else "passed=0") in engine, engine
    assert ("passed" if gpu else "skipped") in steps["tests.python_cuda"][1]
    with open(out / "roundtrip.json") as f:
        rt = json.load(f)
    assert rt["status"] == "PASS" and rt["tensors"] > 0 and not rt["problems"], rt
    with open(out / "bench.json") as f:
        bench = json.load(f)
    assert bench["restore_bit_exact"] and bench["tensors"] >= 300, bench
    for key in ("snapshot_speed_vs_pinned", "blocked_vs_snapshot", "restore_vs_h2d",
                "restore_relaunch_vs_h2d"):
        assert bench[key] > 0, (key, bench)
    report = (out / "gpu.md").read_text()
    assert "| snapshot speed / torch copy into pinned host tensors | %s |" % (
        bench["snapshot_speed_vs_pinned"]) in report
    assert ("No GPU was visible" in report) == (not gpu)
    # The copies on the engine's lanes: measured on a GPU, named as missing without one.
    lanes = [line for line in report.splitlines() if "round-robin over 4 streams" in line]
    assert lanes, report
    missing = "pinned host tensors not measured"
    assert all((missing in line) == (not gpu) for line in lanes), lanes
    # The copies back from registered memory: a GPU's figure; memento's restore: always.
    back = [line for line in report.splitlines() if "back to the device" in line]
    assert len(back) == 1, report
    assert ("on one stream not measured" in back[0]) == (not gpu), back
    assert "memento's restore %.2f GB/s" % bench["restore_gbps"] in back[0], back
    # The restore after a relaunch: through pinned buffers on a GPU (the store is not
    # registered), host tensors copied as ever without one.
    assert bench["restore_relaunch_staged"] == gpu, bench
    relaunch = [line for line in report.splitlines() if line.startswith("Restore after")]
    assert len(relaunch) == 1, report
    assert "%.3f ms (%.2f GB/s)" % (bench["restore_relaunch_s"] * 1e3,
                                    bench["restore_relaunch_gbps"]) in relaunch[0], relaunch
    assert "its next restore, with the pinned buffer pairs made: %.3f ms" % (
        bench["restore_relaunch_again_s"] * 1e3) in relaunch[0], relaunch
    assert relaunch[0].endswith("pinned buffers: %s." % gpu), relaunch
    assert "| restore after a relaunch / torch copy from pinned host tensors | %s |" % (
        bench["restore_relaunch_vs_h2d"]) in report
    # The first saves into the two slots, and the engine's warnings (none in this run).
    first = [line for line in report.splitlines() if line.startswith("The first save()")]
    assert len(first) == 1 and len(bench["first_save_calls_s"]) == 2, (first, bench)
    assert "%s ms" % ", ".join("%.3f" % (t * 1e3) for t in bench["first_save_calls_s"]) \
        in first[0], first
    assert bench["engine_warnings"] == [] and first[0].endswith("warnings: none."), first
    # Where the training's time per save goes.
    assert "blocked %.3f ms per save of which %.3f ms in wait_snapshot()" % (
        bench["blocked_per_save_s"] * 1e3, bench["blocked_in_wait_snapshot_s"] * 1e3) in report
    # The snapshot's worker count (auto), and the snapshot with each count set.
    threads = [line for line in report.splitlines() if line.startswith("Snapshot worker")]
    assert len(threads) == 1, report
    assert "threads: %d (MEMENTO_THREADS=auto)" % bench["snapshot_threads"] in threads[0]
    direct, staged = threads[0].split("MEMENTO_DEVICE_COPY=staged")
    for key, part in (("snapshot_gbps_by_threads", direct),
                      ("staged_snapshot_gbps_by_threads", staged)):
        assert sorted(bench[key]) == ["2", "4", "8"], bench
        for n, v in bench[key].items():
            assert v > 0 and "%s threads %.2f GB/s" % (n, v) in part, (key, n, threads)
    # The restore in the saving process with each kind of device copy.
    by_copy = [line for line in report.splitlines() if line.startswith("The restore in the")]
    assert len(by_copy) == 1 and sorted(bench["restore_gbps_by_copy"]) == ["direct", "staged"]
    for copy, v in bench["restore_gbps_by_copy"].items():
        assert v > 0 and "%s %.2f GB/s" % (copy, v) in by_copy[0], by_copy


def test_a_python_without_torch_is_named_and_stops_the_run(tmp_path):
    bare = tmp_path / "bare-python"
    bare.write_text("#!/bin/sh\nexec %s -S -I \"$@\"\n" % sys.executable)
    bare.chmod(0o755)
    run = subprocess.run([SCRIPT, "--python", str(bare), "--build-dir", str(tmp_path / "b"),
                          "--out", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 2, run.stdout[-3000:]
    assert "MISSING: a CUDA build of torch for %s" % bare in run.stdout
    assert not (tmp_path / "b").exists(), "nothing is configured when a dependency is missing"


@pytest.mark.parametrize("var,value", [("GPU_CHECK_BUILD_S", "abc"),
                                       ("GPU_CHECK_DEADLINE_S", "0")])
def test_a_bad_time_limit_is_named_before_anything_runs(tmp_path, var, value):
    run = subprocess.run([SCRIPT, "--out", str(tmp_path / "out")], capture_output=True,
                         text=True, timeout=60, env=dict(os.environ, **{var: value}))
    assert run.returncode == 2, run.stdout[-3000:]
    assert "%s='%s' must be a whole number of seconds" % (var, value) in run.stdout + run.stderr
    assert not (tmp_path / "out").exists(), "nothing is written for a bad setting"


def test_the_report_refuses_a_folder_that_is_not_a_run(tmp_path):
    run = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "torch",
                                                       "gpu_report.py"), "--out", str(tmp_path)],
                         capture_output=True, text=True)
    assert run.returncode != 0 and "not a gpu-check output folder" in run.stderr
