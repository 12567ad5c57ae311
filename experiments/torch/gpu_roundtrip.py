#!/usr/bin/env python3
"""A transformer with AdamW on one GPU through memento, end to end (one process).

    PYTHONPATH=build/python python experiments/torch/gpu_roundtrip.py [--device cuda|cpu]
        [--small] [--steps 6] [--json FILE]

A GPT-like model (token and position embeddings, 8 pre-norm transformer layers
of width 512, an untied head: about 34 M parameters) trains --steps steps with
AdamW in the README's loop (wait_snapshot() before optimizer.step(), save()
after it). Then every byte of every parameter, buffer and optimizer state
tensor is inverted in place and the lr changed, restore() runs, and each
tensor must equal the state after the last step bit for bit, in place (same
data pointers). Prints the save / snapshot / commit times and the restore time,
and a last line "ROUNDTRIP PASS|FAIL {json}" (also written to --json).

--device cpu --small is a check of the script itself on a machine without a GPU.
"""
import argparse
import json
import os
import statistics
import sys
import time
import uuid

import torch
import torch.nn.functional as F

import memento


class Gpt(torch.nn.Module):
    def __init__(self, vocab, width, heads, layers, ctx):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Embedding(ctx, width)
        layer = torch.nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1,
                                                 batch_first=True, norm_first=True)
        self.blocks = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        causal = torch.triu(torch.full((ctx, ctx), float("-inf")), 1)
        self.register_buffer("causal", causal, persistent=False)

    def forward(self, x):
        t = x.shape[1]
        h = self.tok(x) + self.pos(torch.arange(t, device=x.device))
        return self.head(self.norm(self.blocks(h, mask=self.causal[:t, :t])))


def state_tensors(model, opt):
    """[(name, tensor)]: the model's state dict, then every optimizer state tensor."""
    out = [("model." + k, v) for k, v in model.state_dict().items()]
    params = [p for g in opt.param_groups for p in g["params"]]
    for i, p in enumerate(params):
        for k, v in sorted(opt.state.get(p, {}).items()):
            if torch.is_tensor(v):
                out.append(("optim.%d.%s" % (i, k), v))
    return out


def invert_bytes(t):
    """Every byte of `t` changed (in place, any dtype)."""
    flat = t.detach().view(-1) if t.dim() > 0 else t.detach().view(1)
    raw = flat.view(torch.uint8)
    raw.bitwise_not_()


def run(args):
    dev = args.device
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    if dev == "cuda":
        torch.cuda.set_device(0)  # before register(), as the README asks
    torch.manual_seed(0)
    vocab, width, heads, layers, ctx, batch = ((512, 64, 4, 2, 32, 4) if args.small
                                               else (8192, 512, 8, 8, 256, 8))
    model = Gpt(vocab, width, heads, layers, ctx).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    params = sum(p.numel() for p in model.parameters())
    job = "gpu-roundtrip-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    result = {"device": dev, "gpu": torch.cuda.get_device_name(0) if dev == "cuda" else "",
              "torch": torch.__version__, "torch_cuda": torch.version.cuda,
              "parameters_m": round(params / 1e6, 1)}
    print("model: %.1f M parameters on %s, job %s" % (params / 1e6, dev, job))
    with memento.Checkpointer(job=job, launcher="single", scheme="none", slots=2,
                              persist_every=0) as ck:
        ck.register(model, opt)
        assert ck.restore() is None, "a fresh job restored a version"
        save_s, snap_s, commit_s = [], [], []
        for step in range(args.steps):
            x = torch.randint(0, vocab, (batch, ctx + 1), device=dev)
            loss = F.cross_entropy(model(x[:, :-1]).reshape(-1, vocab), x[:, 1:].reshape(-1))
            loss.backward()
            ck.wait_snapshot()
            opt.step()
            opt.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            ck.save(step + 1)
            save_s.append(time.perf_counter() - t0)
            ck.wait_snapshot()
            snap_s.append(time.perf_counter() - t0)
            ck.wait()
            commit_s.append(time.perf_counter() - t0)
            print("step %d loss %.4f: save() %.2f ms, snapshot %.2f ms, committed %.2f ms"
                  % (step + 1, loss.item(), save_s[-1] * 1e3, snap_s[-1] * 1e3,
                     commit_s[-1] * 1e3))
        registered = ck.tensors()
        state_bytes = sum(t.numel() * t.element_size() for _, t, _ in registered)
        pointers = [t.data_ptr() for _, t, _ in registered]
        expect = {k: v.detach().to("cpu", copy=True) for k, v in state_tensors(model, opt)}
        lr = opt.param_groups[0]["lr"]

        with torch.no_grad():
            for _, v in state_tensors(model, opt):
                invert_bytes(v)
        opt.param_groups[0]["lr"] = 1.0
        sync()
        t0 = time.perf_counter()
        report = ck.restore()
        sync()
        restore_s = time.perf_counter() - t0

        problems = []
        if report is None or int(report) != args.steps:
            problems.append("restore() gave %r, not step %d" % (report, args.steps))
        if [t.data_ptr() for _, t, _ in ck.tensors()] != pointers:
            problems.append("restore() did not write in place (data pointers changed)")
        got = dict(state_tensors(model, opt))
        for name, want in expect.items():
            have = got[name].detach().to("cpu")
            if not (have.dtype == want.dtype and have.shape == want.shape and
                    torch.equal(have.view(-1).view(torch.uint8),
                                want.view(-1).view(torch.uint8))):
                problems.append("%s differs from the state after step %d" % (name, args.steps))
        if opt.param_groups[0]["lr"] != lr:
            problems.append("lr %r after restore, expected %r" % (opt.param_groups[0]["lr"], lr))
    later = slice(1, None) if args.steps > 1 else slice(None)
    result.update({
        "tensors": len(expect), "state_mb": round(state_bytes / 1e6, 1),
        "save_ms": round(statistics.median(save_s[later]) * 1e3, 3),
        "snapshot_ms": round(statistics.median(snap_s[later]) * 1e3, 3),
        "commit_ms": round(statistics.median(commit_s[later]) * 1e3, 3),
        "restore_ms": round(restore_s * 1e3, 3),
        "problems": problems[:10]})
    for p in problems[:20]:
        print("  MISMATCH:", p)
    return not problems, result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="a ~0.2 M parameter model")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_roundtrip: --device cuda, but torch sees no GPU "
                 "(torch %s, built for CUDA %s)" % (torch.__version__, torch.version.cuda))
    ok, result = run(args)
    result["status"] = "PASS" if ok else "FAIL"
    line = json.dumps(result, sort_keys=True)
    if args.json:
        with open(args.json, "w") as f:
            f.write(line + "\n")
    print("ROUNDTRIP %s %s" % (result["status"], line))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
