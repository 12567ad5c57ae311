"""Data-parallel training with DDP over gloo (no checkpointing): the baseline of ddp_train.py."""
import torch

import ddp_common
import fault


def main():
    args, rank, model, optimizer = ddp_common.setup(__doc__)

    for step in range(0, args.steps):
        x, y = ddp_common.batch(16)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        fault.maybe_die(step + 1, rank)

    if args.out:
        ddp_common.dump("%s/rank%d.pt" % (args.out, rank), model, optimizer)
    print("rank %d: done %d steps, loss %.6f" % (rank, args.steps, loss.item()), flush=True)


if __name__ == "__main__":
    main()
