"""What a Python job tells `memento launch` (the launcher's job protocol).

The engine's torch adapter writes the records itself, the same ones the C++
demo writes: a start event when the Checkpointer is created, a step event at
every save() (the step, the time since the previous save, the time the
training thread was blocked in save() and wait_snapshot(), and the loss given
to save(loss=...)), each restore()'s outcome with where every entry came from,
and the done event at close(). It also takes part in the launcher's stage
fault injection (`--inject N@STEP:snapshot|protect|commit|persist`,
`N@recovery`). Outside the launcher (no MEMENTO_LAUNCH_DIR) nothing is written.
This module holds what is computed in Python: whether the job runs under the
launcher, and the hash of the final state that the done event carries.
"""
import hashlib
import os

import torch


def active():
    """True when this process was started by `memento launch`."""
    return bool(os.environ.get("MEMENTO_LAUNCH_DIR"))


def state_hash(entries):
    """Hex digest (16 digits) of the bytes of the tensors `entries` [(name, tensor, ...)], in
    order with their names: identifies this rank's state at the end of a run."""
    h = hashlib.sha256()
    for entry in entries:
        name, tensor = entry[0], entry[1]
        h.update(name.encode())
        t = tensor.detach()
        if t.device.type != "cpu":
            t = t.cpu()
        t = t.contiguous()
        if t.numel() > 0:
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]
