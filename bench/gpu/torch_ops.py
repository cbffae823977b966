#!/usr/bin/env python3
"""torch_ops.py - the PyTorch reference for bench/gpu: the same ops as kernels_bench_gpu at the
same sizes, timed the same way (median of repetitions, each 20 back-to-back calls between two
CUDA events), and one training step of SASRec as pmixer/SASRec.pytorch HEAD writes it (post-LN
blocks, nn.MultiheadAttention, Conv1d feed-forward, BCE with logits on positions with a target,
Adam), on a synthetic batch already on the GPU: the reference's GPU time per step, without its
Python sampler and host-to-device copies.

    python3 bench/gpu/torch_ops.py [--reps N] [--size B,L] [--device cuda|cpu]

Output: '#' header lines, then rows "  op dir ms" with kernels_bench_gpu's op names, so that
bench/gpu/run.sh can join the two tables and print ratios; the step row is "step (model)".
Needs PyTorch (any 1.13+); --device cpu exists to check the script on a machine without a GPU.
"""
import argparse
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

C, NH, V, PDROP, NPARAMS, INNER = 50, 1, 3417, 0.2, 212000, 20


class Timer:
    """Per-call median over reps of INNER calls, with CUDA events (or the host clock on CPU)."""

    def __init__(self, device, reps):
        self.cuda = device.type == "cuda"
        self.reps = reps

    def __call__(self, fn):
        for _ in range(3):
            fn()
        times = []
        for _ in range(self.reps):
            if self.cuda:
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
                for _ in range(INNER):
                    fn()
                e1.record()
                e1.synchronize()
                times.append(e0.elapsed_time(e1) / INNER)
            else:
                t0 = time.perf_counter()
                for _ in range(INNER):
                    fn()
                times.append((time.perf_counter() - t0) * 1e3 / INNER)
        return statistics.median(times)


def row(op, direction, ms):
    print(f"  {op:<22} {direction:<4} {ms:9.4f}", flush=True)


def fwd_bwd(timer, op, f, inputs, grad_dir=True):
    """Rows for f(*inputs) and for its backward (autograd.grad on a retained graph)."""
    row(op, "fwd", timer(lambda: f(*inputs)))
    if grad_dir:
        leaves = [t for t in inputs if isinstance(t, torch.Tensor) and t.requires_grad]
        out = f(*inputs)
        g = torch.randn_like(out)
        row(op, "bwd", timer(lambda: torch.autograd.grad(out, leaves, g, retain_graph=True)))


class FeedForward(torch.nn.Module):
    """pmixer's PointWiseFeedForward: conv1 -> dropout -> relu -> conv2 -> dropout."""

    def __init__(self, c, p):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(c, c, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(c, c, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p)

    def forward(self, x):
        y = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(x.transpose(-1, -2))))))
        return y.transpose(-1, -2)


class SASRec(torch.nn.Module):
    """pmixer/SASRec.pytorch HEAD, norm_first=False (docs/models.md §2.3 (a))."""

    def __init__(self, items, maxlen, c, blocks, heads, p):
        super().__init__()
        self.item_emb = torch.nn.Embedding(items + 1, c, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(maxlen + 1, c, padding_idx=0)
        self.emb_dropout = torch.nn.Dropout(p)
        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        for _ in range(blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(c, eps=1e-8))
            self.attention_layers.append(torch.nn.MultiheadAttention(c, heads, p))
            self.forward_layernorms.append(torch.nn.LayerNorm(c, eps=1e-8))
            self.forward_layers.append(FeedForward(c, p))
        self.last_layernorm = torch.nn.LayerNorm(c, eps=1e-8)
        self.c = c

    def log2feats(self, seqs):
        x = self.item_emb(seqs) * math.sqrt(self.c)
        L = seqs.shape[1]
        poss = torch.arange(1, L + 1, device=seqs.device).unsqueeze(0) * (seqs != 0)
        x = self.emb_dropout(x + self.pos_emb(poss))
        mask = ~torch.tril(torch.ones((L, L), dtype=torch.bool, device=seqs.device))
        for i in range(len(self.attention_layers)):
            x = x.transpose(0, 1)
            att, _ = self.attention_layers[i](x, x, x, attn_mask=mask)
            x = self.attention_layernorms[i](x + att)
            x = x.transpose(0, 1)
            x = self.forward_layernorms[i](x + self.forward_layers[i](x))
        return self.last_layernorm(x)

    def forward(self, seqs, pos, neg):
        feats = self.log2feats(seqs)
        return (feats * self.item_emb(pos)).sum(-1), (feats * self.item_emb(neg)).sum(-1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--size", default="128,200", help="B,L")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args()
    try:
        B, L = (int(v) for v in args.size.split(","))
    except ValueError:
        sys.exit(f"torch_ops.py: --size wants B,L, got '{args.size}'")
    if args.reps < 1 or B < 1 or L < 2:
        sys.exit("torch_ops.py: --reps, B must be >= 1 and L >= 2")
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_ops.py: no CUDA device visible to PyTorch")
    dev = torch.device(args.device)
    torch.manual_seed(0)
    timer = Timer(dev, args.reps)
    N, HS = B * L, C // NH
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"
    print(f"# torch_ops: PyTorch {torch.__version__} on {name}")
    print(f"# sizes: B={B} L={L} d={C} h={NH} dropout={PDROP} layout=post_ln items={V - 1}, "
          f"median of {args.reps} x {INNER} calls")
    print(f"# {'op':<22} {'dir':<4} {'ms':>9}")

    def rnd(*shape, grad=True):
        return torch.randn(*shape, device=dev).requires_grad_(grad)

    # Left-padded batch, about half real (as kernels_bench_gpu's).
    seq = torch.zeros(B, L, dtype=torch.long, device=dev)
    for b in range(B):
        n = 1 + (16 + (b * 37) % 184) * (L - 1) // 200
        seq[b, L - n:] = torch.randint(1, V, (n,), device=dev)
    pos = torch.where(seq != 0, torch.randint(1, V, (B, L), device=dev), seq)
    neg = torch.where(seq != 0, torch.randint(1, V, (B, L), device=dev), seq)

    x, w3, b3 = rnd(N, C), rnd(3 * C, C), rnd(3 * C)
    w, b = rnd(C, C), rnd(C)
    ln_w, ln_b = rnd(C), rnd(C)
    mask = ~torch.tril(torch.ones((L, L), dtype=torch.bool, device=dev))

    def attention(qkv, p):
        q, k, v = qkv.view(B, L, 3, NH, HS).permute(2, 0, 3, 1, 4)
        s = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(HS))
        a = s.masked_fill(mask, float("-inf")).softmax(-1)
        return (F.dropout(a, p, True) @ v).transpose(1, 2).reshape(N, C)

    print("# one block, forward and backward")
    fwd_bwd(timer, "qkv projection", F.linear, (x, w3, b3))
    fwd_bwd(timer, "attention", attention, (rnd(N, 3 * C), PDROP))
    fwd_bwd(timer, "out projection", F.linear, (x, w, b))
    fwd_bwd(timer, "residual", torch.add, (x, rnd(N, C)))
    fwd_bwd(timer, "layernorm", lambda t: F.layer_norm(t, (C,), ln_w, ln_b, 1e-8), (x,))
    fwd_bwd(timer, "ffn conv1", F.linear, (x, w, b))
    fwd_bwd(timer, "dropout", lambda t: F.dropout(t, PDROP, True), (x,))
    fwd_bwd(timer, "relu", F.relu, (x,))
    print("# per step, outside the blocks")
    wte, wpe = rnd(V, C), rnd(L + 1, C)
    poss = torch.arange(1, L + 1, device=dev).unsqueeze(0) * (seq != 0)
    fwd_bwd(timer, "embedding",
            lambda e, p: F.embedding(seq, e, padding_idx=0) * math.sqrt(C)
            + F.embedding(poss, p, padding_idx=0), (wte, wpe))
    y = rnd(B, L, C)
    fwd_bwd(timer, "scores pos+neg",
            lambda f, e: torch.stack(((f * F.embedding(pos, e)).sum(-1),
                                      (f * F.embedding(neg, e)).sum(-1))), (y, wte))
    pl, nl = rnd(B, L), rnd(B, L)
    ind = pos != 0

    def bce():
        pl.grad = nl.grad = None
        loss = F.binary_cross_entropy_with_logits(pl[ind], torch.ones_like(pl[ind])) \
            + F.binary_cross_entropy_with_logits(nl[ind], torch.zeros_like(nl[ind]))
        loss.backward()

    row("bce loss", "f+b", timer(bce))
    grads = torch.randn(NPARAMS, device=dev)
    row("grad norm", "-", timer(lambda: (grads * grads).sum()))
    p = torch.nn.Parameter(torch.randn(NPARAMS, device=dev))
    p.grad = grads
    opt = torch.optim.Adam([p], lr=1e-3, betas=(0.9, 0.98), eps=1e-8)
    row("adam", "-", timer(opt.step))
    print("# evaluation")
    U = 6040 if B * L >= 128 * 200 else 64
    feats = torch.randn(U, C, device=dev)
    targets = torch.randint(1, V, (U,), device=dev)
    with torch.no_grad():
        row("eval score all", "-", timer(lambda: feats @ wte.T))
        sc = feats @ wte.T
        row("eval rank all", "-",
            timer(lambda: (sc[:, 1:] >= sc.gather(1, targets[:, None])).sum(1) - 1))

    print("# one training step of the reference model (synthetic batch on the device)")
    model = SASRec(V - 1, L, C, 2, NH, PDROP).to(dev)
    mopt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-8)

    def step():
        mopt.zero_grad()
        pl_, nl_ = model(seq, pos, neg)
        loss = F.binary_cross_entropy_with_logits(pl_[ind], torch.ones_like(pl_[ind])) \
            + F.binary_cross_entropy_with_logits(nl_[ind], torch.zeros_like(nl_[ind]))
        loss.backward()
        mopt.step()

    model.train()
    row("step (model)", "-", timer(step))


if __name__ == "__main__":
    main()
