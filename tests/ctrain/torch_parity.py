#!/usr/bin/env python3
"""torch_parity.py OUT_DIR CONVERTER - the PyTorch side of test_torch_parity.

Builds a small SASRec in PyTorch op for op as pmixer/SASRec.pytorch does (nn.Embedding with
padding_idx, nn.MultiheadAttention in time-first layout with a causal bool mask, Conv1d
kernel-1 FFN, LayerNorm eps 1e-8, tied item embeddings, BCEWithLogitsLoss over positions with a
target, optional l2_emb * sum(item_emb^2), Adam betas (0.9, 0.98)), for each block layout:

  post_ln       HEAD, norm_first=False
  pre_ln        HEAD, norm_first=True
  original      June 2024 - May 2025: Q = LNa(x); x = Q + MHA(Q, x, x); x = LNf(x);
                x = x + FFN(x) (the FFN's internal residual); padded position ids
  original2020  the 2020 code: (original) with positions 0..L-1 over an L-row table and the
                timeline mask after the embedding and after every block

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

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[2])))
from convert_pytorch_checkpoint import write_safetensors  # noqa: E402

B, L, D, HEADS, BLOCKS, ITEMS = 4, 7, 16, 2, 2, 30
LR, L2 = 1e-3, 0.01
LAYOUTS = ["post_ln", "pre_ln", "original", "original2020"]


class PointWiseFeedForward(torch.nn.Module):
    def __init__(self, d):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(d, d, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=0.0)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(d, d, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=0.0)

    def forward(self, inputs):
        out = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(inputs.transpose(-1, -2))))))
        return out.transpose(-1, -2)


class SASRec(torch.nn.Module):
    def __init__(self, layout):
        super().__init__()
        self.layout = layout
        padded = layout != "original2020"
        self.item_emb = torch.nn.Embedding(ITEMS + 1, D, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(L + 1 if padded else L, D,
                                          padding_idx=0 if padded else None)
        self.emb_dropout = torch.nn.Dropout(p=0.0)
        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        self.last_layernorm = torch.nn.LayerNorm(D, eps=1e-8)
        for _ in range(BLOCKS):
            self.attention_layernorms.append(torch.nn.LayerNorm(D, eps=1e-8))
            self.attention_layers.append(torch.nn.MultiheadAttention(D, HEADS, 0.0))
            self.forward_layernorms.append(torch.nn.LayerNorm(D, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(D))

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs)
        seqs = seqs * self.item_emb.embedding_dim ** 0.5
        nb, nl = log_seqs.shape
        if self.layout == "original2020":
            poss = torch.arange(nl).unsqueeze(0).expand(nb, -1)
        else:
            poss = torch.arange(1, nl + 1).unsqueeze(0).expand(nb, -1) * (log_seqs != 0)
        seqs = seqs + self.pos_emb(poss)
        seqs = self.emb_dropout(seqs)
        keep = (log_seqs != 0).unsqueeze(-1)
        if self.layout == "original2020":
            seqs = seqs * keep
        mask = ~torch.tril(torch.ones((nl, nl), dtype=torch.bool))
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            if self.layout == "pre_ln":
                x = self.attention_layernorms[i](seqs)
                out, _ = self.attention_layers[i](x, x, x, attn_mask=mask)
                seqs = seqs + out
                seqs = torch.transpose(seqs, 0, 1)
                seqs = seqs + self.forward_layers[i](self.forward_layernorms[i](seqs))
            elif self.layout == "post_ln":
                out, _ = self.attention_layers[i](seqs, seqs, seqs, attn_mask=mask)
                seqs = self.attention_layernorms[i](seqs + out)
                seqs = torch.transpose(seqs, 0, 1)
                seqs = self.forward_layernorms[i](seqs + self.forward_layers[i](seqs))
            else:
                q = self.attention_layernorms[i](seqs)
                out, _ = self.attention_layers[i](q, seqs, seqs, attn_mask=mask)
                seqs = q + out
                seqs = torch.transpose(seqs, 0, 1)
                seqs = self.forward_layernorms[i](seqs)
                seqs = seqs + self.forward_layers[i](seqs)
                if self.layout == "original2020":
                    seqs = seqs * keep
        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs):
        feats = self.log2feats(log_seqs)
        return ((feats * self.item_emb(pos_seqs)).sum(-1),
                (feats * self.item_emb(neg_seqs)).sum(-1))


def inputs(gen):
    """Right-aligned rows as SASRec's sampler builds them: lengths 2, 4, L+1 and L+3."""
    seq = torch.zeros((B, L), dtype=torch.long)
    pos = torch.zeros((B, L), dtype=torch.long)
    neg = torch.zeros((B, L), dtype=torch.long)
    for b, m in enumerate([2, 4, L + 1, L + 3]):
        s = torch.randint(1, ITEMS + 1, (m,), generator=gen)
        n = min(m - 1, L)
        seq[b, L - n:] = s[m - 1 - n:m - 1]
        pos[b, L - n:] = s[m - n:]
        for t in range(L - n, L):
            while True:
                v = int(torch.randint(1, ITEMS + 1, (1,), generator=gen))
                if v not in s.tolist():
                    break
            neg[b, t] = v
    return seq, pos, neg


def f32(t):
    t = t.detach().to(torch.float32).contiguous()
    return ("F32", tuple(t.shape), t.numpy().tobytes())


def i32(t):
    t = t.detach().to(torch.int32).contiguous()
    return ("I32", tuple(t.shape), t.numpy().tobytes())


def main():
    out, converter = sys.argv[1], sys.argv[2]
    torch.manual_seed(1234)
    gen = torch.Generator().manual_seed(99)
    seq, pos, neg = inputs(gen)
    for k, layout in enumerate(LAYOUTS):
        model = SASRec(layout)
        # pmixer's initialisation: xavier_normal_ on every tensor that has >= 2 dims
        for _, p in model.named_parameters():
            try:
                torch.nn.init.xavier_normal_(p.data)
            except ValueError:
                pass
        model.item_emb.weight.data[0, :] = 0
        if layout != "original2020":
            model.pos_emb.weight.data[0, :] = 0
        # non-zero biases and LayerNorm affines, so every parameter is exercised
        with torch.no_grad():
            for name, p in model.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn(p.shape))
        l2 = L2 if k % 2 == 1 else 0.0
        pth = os.path.join(out, "model_%s.pth" % layout)
        torch.save(model.state_dict(), pth)
        st = os.path.join(out, "model_%s.safetensors" % layout)
        subprocess.run([sys.executable, converter, pth, st], check=True,
                       stdout=subprocess.DEVNULL)

        model.train()
        pl, nl = model(seq, pos, neg)
        idx = torch.where(pos != 0)
        bce = torch.nn.BCEWithLogitsLoss()
        loss = bce(pl[idx], torch.ones_like(pl[idx])) + bce(nl[idx], torch.zeros_like(nl[idx]))
        loss = loss + l2 * torch.sum(model.item_emb.weight ** 2)
        opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98))
        opt.zero_grad()
        loss.backward()
        tensors = {"seq": i32(seq), "pos": i32(pos), "neg": i32(neg),
                   "pos_logits": f32(pl), "neg_logits": f32(nl),
                   "loss": f32(loss.reshape(1))}
        for name, p in model.named_parameters():
            tensors["grad." + name] = f32(p.grad)
        opt.step()
        for name, p in model.named_parameters():
            tensors["adam1." + name] = f32(p)
        model.eval()
        with torch.no_grad():
            tensors["feats"] = f32(model.log2feats(seq)[:, -1, :])
        meta = {"layout": layout, "B": B, "L": L, "d": D, "heads": HEADS, "blocks": BLOCKS,
                "items": ITEMS, "lr": LR, "l2": l2, "torch": torch.__version__}
        write_safetensors(os.path.join(out, "ref_%s.safetensors" % layout), tensors, meta)
    print("torch %s: wrote %d layouts to %s" % (torch.__version__, len(LAYOUTS), out))


if __name__ == "__main__":
    main()
