#!/usr/bin/env python3
"""torch_parity.py OUT_DIR CONVERTER - the PyTorch side of test_torch_parity.

Builds small models with torch_ref.py, the PyTorch implementation written op for op from
pmixer/SASRec.pytorch and pmixer/TiSASRec.pytorch: SASRec (nn.Embedding with padding_idx,
nn.MultiheadAttention in time-first layout with a causal bool mask, Conv1d kernel-1 FFN,
LayerNorm eps 1e-8, tied item embeddings, BCEWithLogitsLoss over positions with a target,
optional l2_emb * sum(item_emb^2), Adam betas (0.9, 0.98)) for each block layout, and TiSASRec
(absolute-position and interval key/value tables, the time matrix of each row clipped at
time_span, the padding-query mask before the softmax, no output projection, l2_emb as the norm
of each of its five tables in half the runs):

  post_ln       HEAD, norm_first=False
  pre_ln        HEAD, norm_first=True
  original      June 2024 - May 2025: Q = LNa(x); x = Q + MHA(Q, x, x); x = LNf(x);
                x = x + FFN(x) (the FFN's internal residual); padded position ids
  original2020  the 2020 code: (original) with positions 0..L-1 over an L-row table and the
                timeline mask after the embedding and after every block
  tisasrec      TiSASRec.pytorch

Dropout is 0 (the masks of two different generators cannot match), so what is compared is
the deterministic computation. For each layout it writes
  model_<layout>.pth          torch.save(model.state_dict()), then converted with CONVERTER to
  model_<layout>.safetensors  (the file ctrain loads: this also tests the converter)
  ref_<layout>.safetensors    inputs, logits, loss, every gradient ("grad.<name>"), the
                              parameters after one Adam step ("adam1.<name>") and the final
                              features of column L-1 in eval mode ("feats")
"""

import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[2])))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convert_pytorch_checkpoint import write_safetensors  # noqa: E402
from torch_ref import SASRec, TiSASRec, bce_loss, time_matrix  # noqa: E402

B, L, D, HEADS, BLOCKS, ITEMS, SPAN = 4, 7, 16, 2, 2, 30, 5
LR, L2 = 1e-3, 0.01
LAYOUTS = ["post_ln", "pre_ln", "original", "original2020", "tisasrec"]


def inputs(gen):
    """Right-aligned rows as SASRec's sampler builds them: lengths 2, 4, L+1 and L+3, with
    TiSASRec's scaled times (increasing, repeats allowed, gaps past SPAN so some clip)."""
    seq = torch.zeros((B, L), dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    neg = torch.zeros((B, L), dtype=torch.long)
    tseq = torch.zeros((B, L), dtype=torch.long)
    for b, m in enumerate([2, 4, L + 1, L + 3]):
        s = torch.randint(1, ITEMS + 1, (m,), generator=gen)
        ts = torch.cumsum(torch.randint(0, 4, (m,), generator=gen), 0) + 1
        n = min(m - 1, L)
        seq[b, L - n:] = s[m - 1 - n:m - 1]
        tseq[b, L - n:] = ts[m - 1 - n:m - 1]
        pos[b, L - n:] = s[m - n:]
        for t in range(L - n, L):
            while True:
                v = int(torch.randint(1, ITEMS + 1, (1,), generator=gen))
                if v not in s.tolist():
                    break
            neg[b, t] = v
    return seq, pos, neg, tseq


def f32(t):
    t = t.detach().to(torch.float32).contiguous()
    return ("F32", tuple(t.shape), t.numpy().tobytes())


def i32(t):
    t = t.detach().to(torch.int32).contiguous()
    return ("I32", tuple(t.shape), t.numpy().tobytes())


def i64(t):
    t = t.detach().to(torch.int64).contiguous()
    return ("I64", tuple(t.shape), t.numpy().tobytes())


def main():
    out, converter = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(99)
    seq, pos, neg, tseq = inputs(gen)
    tmat = torch.tensor(np.array([time_matrix(t.numpy(), SPAN) for t in tseq]), dtype=torch.long)
    for k, layout in enumerate(LAYOUTS):
        ti = layout == "tisasrec"
        if ti:
            model = TiSASRec(ITEMS, L, D, HEADS, BLOCKS, 0.0, SPAN)
        else:
            model = SASRec(ITEMS, L, D, HEADS, BLOCKS, 0.0, layout)
        # the references' initialisations (xavier_normal_ + zeroed padding rows for SASRec,
        # xavier_uniform_ for TiSASRec)
        model.init_weights()
        # non-zero biases and LayerNorm affines, so every parameter is exercised
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape))
        l2 = L2 if k % 2 == 1 or ti else 0.0
        pth = os.path.join(out, "model_%s.pth" % layout)
        torch.save(model.state_dict(), pth)
        st = os.path.join(out, "model_%s.safetensors" % layout)
        subprocess.run([sys.executable, converter, pth, st], check=True,
                       stdout=subprocess.DEVNULL)

        model.train()
        pl, nl = model(seq, pos, neg, tmat if ti else None)
        loss = bce_loss(pl, nl, pos) + model.l2_penalty(l2)
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98))
        opt.zero_grad()
        loss.backward()
        tensors = {"seq": i32(seq), "pos": i32(pos), "neg": i32(neg), "tseq": i64(tseq),
                   "pos_logits": f32(pl), "neg_logits": f32(nl),
                   "loss": f32(loss.reshape(1))}
        for name, p in model.named_parameters():
            tensors["grad." + name] = f32(p.grad)
        opt.step()
        for name, p in model.named_parameters():
            tensors["adam1." + name] = f32(p)
        model.eval()
        with torch.no_grad():
            if ti:
                tensors["feats"] = f32(model.seq2feats(seq, tmat)[:, -1, :])
            else:
                tensors["feats"] = f32(model.log2feats(seq)[:, -1, :])
        meta = {"layout": layout, "B": B, "L": L, "d": D, "heads": HEADS, "blocks": BLOCKS,
                "items": ITEMS, "lr": LR, "l2": l2, "time_span": SPAN,
                "torch": torch.__version__}
        write_safetensors(os.path.join(out, "ref_%s.safetensors" % layout), tensors, meta)
    print("torch %s: wrote %d layouts to %s" % (torch.__version__, len(LAYOUTS), out))


if __name__ == "__main__":
    main()
