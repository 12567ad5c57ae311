"""One rank of a memento job of the DCP interop tests (test_dcp.py, torchrun or mpirun).

The job of dcp_plain.py, checkpointed by memento under the plain state dict names:
register(model=gpt, optimizer=opt_g) (FSDP2: DTensor placements) and
register(ddp=mlp, ddp_optimizer=opt_m, replicated=True).

    --phase persist    train --steps steps with remote_format="dcp", persist every
                       version, write the whole tensors to --out (rank 0) and close
    --phase restore    restore (memory is gone: from the DCP-format remote tier), check
                       every entry came from it, write the whole tensors to --out
    --phase from-dcp   restore(from_dcp=--dir) (memento holds nothing of the job),
                       write the whole tensors to --out, then train and save on
Node identities: DCP_NODES (comma-separated, by rank).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dcp_plain  # noqa: E402

import memento  # noqa: E402


def checkpointer(rank, remote):
    nodes = os.environ["DCP_NODES"].split(",")
    return memento.Checkpointer(node=nodes[rank], remote=remote, remote_format="dcp",
                                persist_every=1, persist_keep=2)


def register(ck, parts):
    gpt, opt_g, mlp, opt_m = parts
    ck.register(model=gpt, optimizer=opt_g)
    ck.register(ddp=mlp, ddp_optimizer=opt_m, replicated=True)


def dump(rank, parts, out):
    state = dcp_plain.whole(*parts)
    if rank == 0:
        torch.save(state, out)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--phase", choices=["persist", "restore", "from-dcp"], required=True)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--remote", required=True)
    p.add_argument("--dir", default="")
    p.add_argument("--out", required=True)
    args = p.parse_args()
    rank, world = dcp_plain.fsdp2_train.ddp_common.init_distributed()
    parts = dcp_plain.build(world)
    ck = checkpointer(rank, args.remote)
    register(ck, parts)
    if args.phase == "persist":
        for step in dcp_plain.train(*parts, 0, args.steps):
            ck.wait_snapshot()
            ck.save(step)
        ck.wait()
        ck.wait_persist()
        dump(rank, parts, args.out)
    elif args.phase == "restore":
        report = ck.restore()
        assert report is not None and int(report) == args.steps, report
        sources = set(report.sources().values())
        assert sources == {"remote"}, "rank %d: restored from %s" % (rank, sources)
        dump(rank, parts, args.out)
    else:
        report = ck.restore(from_dcp=args.dir)
        assert report is not None and report.source == "dcp", report
        assert int(report) == args.steps, report
        dump(rank, parts, args.out)
        # Training goes on from the loaded state, checkpointed by memento.
        for step in dcp_plain.train(*parts, args.steps, args.steps + 2):
            ck.wait_snapshot()
            ck.save(step)
        ck.wait()
        assert ck.latest_committed() == args.steps + 2
    ck.close()
    print("rank %d: %s on %d ranks done" % (rank, args.phase, world), flush=True)
    # No rank tears gloo down while a peer may still use its connections.
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
