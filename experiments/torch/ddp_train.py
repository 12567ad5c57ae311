"""Data-parallel training with DDP over gloo, checkpointed in memory by memento every step."""
import torch

import ddp_common
import fault
import memento


def main():
    args, rank, model, optimizer = ddp_common.setup(__doc__)
    ck = memento.Checkpointer()  # settings from MEMENTO_* (scheme, job, ...)
    ck.register(model, optimizer, replicated=True)
    start = ck.restore()  # returns once the tensors hold it; re-protect goes on behind
    print("rank %d: %s; %s" % (rank, start and start.summary,
                               start.protection if start else ck.protection_state()), flush=True)
    for step in range(start or 0, args.steps):
        x, y = ddp_common.batch(16)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        ck.wait_snapshot()
        optimizer.step()
        optimizer.zero_grad()
        ck.save(step + 1)
        fault.maybe_die(step + 1, rank)
    ck.close()  # the normal end: the same job run again starts fresh
    print("rank %d: checkpoints %s" % (rank, ck.protection_state()), flush=True)
    if args.out:
        ddp_common.dump("%s/rank%d.pt" % (args.out, rank), model, optimizer)
    print("rank %d: done %d steps, loss %.6f" % (rank, args.steps, loss.item()), flush=True)


if __name__ == "__main__":
    main()
