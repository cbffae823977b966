#!/usr/bin/env python3
"""torch_ref.py - SASRec and TiSASRec in PyTorch, written from docs/models.md op for op the way
pmixer/SASRec.pytorch (HEAD) and pmixer/TiSASRec.pytorch build them, with their data partition,
batch construction, training step and sampled evaluation. It is the PyTorch side of two things:

  - the equivalence tests (tests/worker/trainer/torch_parity.py imports the models and runs them with
    dropout 0 against ctrain's own code);
  - the speed and accuracy reference of bench/train_bench, through the command line below.

    torch_ref.py train --model sasrec|tisasrec --dataset FILE [--maxlen L] [--batch_size B]
                       [--epochs N] [--max_steps S] [--warmup W] [--threads T]
                       [--eval_every E] [--eval sampled|full|both] [--dropout P] [--seed N]
                       [--lr X] [--l2_emb X] [--time_span K] [--device cpu|cuda]

prints one JSON object per line: {"event": "epoch", "epoch", "steps", "positions",
"train_seconds", "sample_seconds", "loss"} after every epoch, {"event": "eval", "epoch",
"valid": [ndcg, hr], "test": [ndcg, hr], "seconds"} after every evaluation (with --eval full or
both also "valid_full" and "test_full", [ndcg, hr] under full ranking), and {"event": "done", ...}
at the end.

What follows the references exactly: the models (layouts, masks, dropout sites, no output
projection in TiSASRec, pmixer's padding-query mask), initialisation (xavier_normal_ +
zeroed padding rows for SASRec, xavier_uniform_ for TiSASRec), the loss (BCEWithLogits means
over positions with a target, l2_emb as sum of squares on item_emb for SASRec HEAD and as the
plain norm of five tables for TiSASRec), Adam betas (0.9, 0.98), the samplers' rules (SASRec
HEAD: a reshuffled permutation of the users; TiSASRec: users drawn with replacement; one
negative per position outside the user's training items; TiSASRec's time matrix cached per
user) and the sampled evaluation (100 negatives; TiSASRec also excludes the held-out items).
What differs, deliberately: batches are built by ONE background process (pmixer starts three,
which on the 2-core machine this is measured on would only steal the model's cores), the
evaluation scores users in batches instead of one at a time (same numbers), and TiSASRec's
time matrices are computed with numpy instead of a Python double loop (same integers).
What is added: the full-ranking protocol (the references have none), defined as ctrain's
(ctrain_eval.h): every item but item 0 and the user's history (training items, and on the test
split the validation item), the target never excluded, ties counted against the target.
"""

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time

import numpy as np
import torch

NEG_BIG = -2.0 ** 32 + 1  # the masking constant of the references


# ---- models -------------------------------------------------------------------------------------

class PointWiseFeedForward(torch.nn.Module):
    """Two kernel-1 Conv1d layers, dropout after each, ReLU after the first dropout. With
    residual=True the input is added (TiSASRec and SASRec's 'original' layouts)."""

    def __init__(self, d, p, residual):
        super().__init__()
        self.conv1 = torch.nn.Conv1d(d, d, kernel_size=1)
        self.dropout1 = torch.nn.Dropout(p=p)
        self.relu = torch.nn.ReLU()
        self.conv2 = torch.nn.Conv1d(d, d, kernel_size=1)
        self.dropout2 = torch.nn.Dropout(p=p)
        self.residual = residual

    def forward(self, x):
        h = self.dropout2(self.conv2(self.relu(self.dropout1(self.conv1(x.transpose(-1, -2))))))
        h = h.transpose(-1, -2)
        return h + x if self.residual else h


class SASRec(torch.nn.Module):
    """SASRec.pytorch's model. layout: post_ln (HEAD default), pre_ln (HEAD --norm_first),
    original (2024: Q = LNa(x); x = Q + MHA(Q, x, x); x = LNf(x); x = x + FFN(x)), original2020
    (original with positions 0..L-1 and the timeline mask)."""

    def __init__(self, items, maxlen, d, heads, blocks, p, layout="post_ln"):
        super().__init__()
        self.layout = layout
        padded = layout != "original2020"
        self.item_emb = torch.nn.Embedding(items + 1, d, padding_idx=0)
        self.pos_emb = torch.nn.Embedding(maxlen + 1 if padded else maxlen, d,
                                          padding_idx=0 if padded else None)
        self.emb_dropout = torch.nn.Dropout(p=p)
        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        self.last_layernorm = torch.nn.LayerNorm(d, eps=1e-8)
        for _ in range(blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(d, eps=1e-8))
            self.attention_layers.append(torch.nn.MultiheadAttention(d, heads, p))
            self.forward_layernorms.append(torch.nn.LayerNorm(d, eps=1e-8))
            self.forward_layers.append(
                PointWiseFeedForward(d, p, residual=layout in ("original", "original2020")))

    def init_weights(self):
        for _, w in self.named_parameters():
            if w.dim() >= 2:
                torch.nn.init.xavier_normal_(w.data)
        self.item_emb.weight.data[0, :] = 0
        if self.layout != "original2020":
            self.pos_emb.weight.data[0, :] = 0

    def log2feats(self, log_seqs):
        seqs = self.item_emb(log_seqs) * self.item_emb.embedding_dim ** 0.5
        nb, nl = log_seqs.shape
        if self.layout == "original2020":
            poss = torch.arange(nl, device=log_seqs.device).unsqueeze(0).expand(nb, -1)
        else:
            poss = (torch.arange(1, nl + 1, device=log_seqs.device).unsqueeze(0).expand(nb, -1) *
                    (log_seqs != 0))
        seqs = self.emb_dropout(seqs + self.pos_emb(poss))
        keep = (log_seqs != 0).unsqueeze(-1)
        if self.layout == "original2020":
            seqs = seqs * keep
        mask = ~torch.tril(torch.ones((nl, nl), dtype=torch.bool, device=log_seqs.device))
        for i in range(len(self.attention_layers)):
            seqs = torch.transpose(seqs, 0, 1)
            if self.layout == "pre_ln":
                x = self.attention_layernorms[i](seqs)
                out, _ = self.attention_layers[i](x, x, x, attn_mask=mask)
                seqs = torch.transpose(seqs + out, 0, 1)
                seqs = seqs + self.forward_layers[i](self.forward_layernorms[i](seqs))
            elif self.layout == "post_ln":
                out, _ = self.attention_layers[i](seqs, seqs, seqs, attn_mask=mask)
                seqs = torch.transpose(self.attention_layernorms[i](seqs + out), 0, 1)
                seqs = self.forward_layernorms[i](seqs + self.forward_layers[i](seqs))
            else:
                q = self.attention_layernorms[i](seqs)
                out, _ = self.attention_layers[i](q, seqs, seqs, attn_mask=mask)
                seqs = torch.transpose(q + out, 0, 1)
                seqs = self.forward_layers[i](self.forward_layernorms[i](seqs))
                if self.layout == "original2020":
                    seqs = seqs * keep
        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs, time_matrices=None):
        feats = self.log2feats(log_seqs)
        return ((feats * self.item_emb(pos_seqs)).sum(-1),
                (feats * self.item_emb(neg_seqs)).sum(-1))

    def final_features(self, log_seqs, time_matrices=None):
        """(U, d): the last column's features, what every score is taken against."""
        return self.log2feats(log_seqs)[:, -1, :]

    def predict(self, log_seqs, items, time_matrices=None):
        """Scores (U, K) of candidate items (U, K) from the last column's features."""
        final = self.final_features(log_seqs)
        return (self.item_emb(items) * final.unsqueeze(1)).sum(-1)

    def l2_penalty(self, lam):
        return lam * torch.sum(self.item_emb.weight ** 2)


class TimeAwareMultiHeadAttention(torch.nn.Module):
    """TiSASRec's attention (docs/models.md §3.3): separate Q/K/V linears, logits
    q.(k + P^K + R^K[tau]) / sqrt(d_h), padding query rows and j > i set to -2^32+1 before the
    softmax, dropout on the probabilities, values v + P^V + R^V[tau], no output projection.
    Heads are stacked on the batch dimension, head-major, as the reference does."""

    def __init__(self, d, heads, p):
        super().__init__()
        self.Q_w = torch.nn.Linear(d, d)
        self.K_w = torch.nn.Linear(d, d)
        self.V_w = torch.nn.Linear(d, d)
        self.dropout = torch.nn.Dropout(p=p)
        self.heads = heads
        self.hs = d // heads

    def forward(self, queries, keys, time_mask, attn_mask, tk, tv, pk, pv):
        q, k, v = self.Q_w(queries), self.K_w(keys), self.V_w(keys)
        split = lambda t, dim: torch.cat(torch.split(t, self.hs, dim=dim), dim=0)  # noqa: E731
        q_, k_, v_ = split(q, 2), split(k, 2), split(v, 2)
        tk_, tv_ = split(tk, 3), split(tv, 3)
        pk_, pv_ = split(pk, 2), split(pv, 2)
        w = q_.matmul(k_.transpose(1, 2))
        w = w + q_.matmul(pk_.transpose(1, 2))
        w = w + tk_.matmul(q_.unsqueeze(-1)).squeeze(-1)
        w = w / (k_.shape[-1] ** 0.5)
        tm = time_mask.unsqueeze(-1).repeat(self.heads, 1, 1).expand(-1, -1, w.shape[-1])
        am = attn_mask.unsqueeze(0).expand(w.shape[0], -1, -1)
        pad = torch.full(w.shape, NEG_BIG, device=w.device)
        w = torch.where(tm, pad, w)
        w = torch.where(am, pad, w)
        w = self.dropout(torch.softmax(w, dim=-1))
        out = w.matmul(v_) + w.matmul(pv_)
        out = out + w.unsqueeze(2).matmul(tv_).reshape(out.shape)
        return torch.cat(torch.split(out, q.shape[0], dim=0), dim=2)


class TiSASRec(torch.nn.Module):
    """TiSASRec.pytorch's model (docs/models.md §3): no positional vector in the input; absolute
    position key/value tables (L rows) and interval key/value tables (time_span + 1 rows), each
    gathered tensor with its own dropout; blocks q = LNa(x); x = q + attn(q, x); x = LNf(x);
    x = x + FFN(x); x *= timeline mask."""

    def __init__(self, items, maxlen, d, heads, blocks, p, time_span):
        super().__init__()
        self.item_emb = torch.nn.Embedding(items + 1, d, padding_idx=0)
        self.item_emb_dropout = torch.nn.Dropout(p=p)
        self.abs_pos_K_emb = torch.nn.Embedding(maxlen, d)
        self.abs_pos_V_emb = torch.nn.Embedding(maxlen, d)
        self.time_matrix_K_emb = torch.nn.Embedding(time_span + 1, d)
        self.time_matrix_V_emb = torch.nn.Embedding(time_span + 1, d)
        self.abs_pos_K_emb_dropout = torch.nn.Dropout(p=p)
        self.abs_pos_V_emb_dropout = torch.nn.Dropout(p=p)
        self.time_matrix_K_dropout = torch.nn.Dropout(p=p)
        self.time_matrix_V_dropout = torch.nn.Dropout(p=p)
        self.attention_layernorms = torch.nn.ModuleList()
        self.attention_layers = torch.nn.ModuleList()
        self.forward_layernorms = torch.nn.ModuleList()
        self.forward_layers = torch.nn.ModuleList()
        self.last_layernorm = torch.nn.LayerNorm(d, eps=1e-8)
        for _ in range(blocks):
            self.attention_layernorms.append(torch.nn.LayerNorm(d, eps=1e-8))
            self.attention_layers.append(TimeAwareMultiHeadAttention(d, heads, p))
            self.forward_layernorms.append(torch.nn.LayerNorm(d, eps=1e-8))
            self.forward_layers.append(PointWiseFeedForward(d, p, residual=True))

    def init_weights(self):
        for _, w in self.named_parameters():
            if w.dim() >= 2:
                torch.nn.init.xavier_uniform_(w.data)

    def seq2feats(self, log_seqs, time_matrices):
        seqs = self.item_emb(log_seqs) * self.item_emb.embedding_dim ** 0.5
        seqs = self.item_emb_dropout(seqs)
        nb, nl = log_seqs.shape
        positions = torch.arange(nl, device=log_seqs.device).unsqueeze(0).expand(nb, -1)
        pk = self.abs_pos_K_emb_dropout(self.abs_pos_K_emb(positions))
        pv = self.abs_pos_V_emb_dropout(self.abs_pos_V_emb(positions))
        tk = self.time_matrix_K_dropout(self.time_matrix_K_emb(time_matrices))
        tv = self.time_matrix_V_dropout(self.time_matrix_V_emb(time_matrices))
        timeline_mask = log_seqs == 0
        seqs = seqs * ~timeline_mask.unsqueeze(-1)
        attention_mask = ~torch.tril(torch.ones((nl, nl), dtype=torch.bool,
                                                device=log_seqs.device))
        for i in range(len(self.attention_layers)):
            q = self.attention_layernorms[i](seqs)
            out = self.attention_layers[i](q, seqs, timeline_mask, attention_mask, tk, tv, pk, pv)
            seqs = self.forward_layernorms[i](q + out)
            seqs = self.forward_layers[i](seqs)
            seqs = seqs * ~timeline_mask.unsqueeze(-1)
        return self.last_layernorm(seqs)

    def forward(self, log_seqs, pos_seqs, neg_seqs, time_matrices):
        feats = self.seq2feats(log_seqs, time_matrices)
        return ((feats * self.item_emb(pos_seqs)).sum(-1),
                (feats * self.item_emb(neg_seqs)).sum(-1))

    def final_features(self, log_seqs, time_matrices):
        return self.seq2feats(log_seqs, time_matrices)[:, -1, :]

    def predict(self, log_seqs, items, time_matrices):
        final = self.final_features(log_seqs, time_matrices)
        return (self.item_emb(items) * final.unsqueeze(1)).sum(-1)

    def l2_penalty(self, lam):
        tables = [self.item_emb, self.abs_pos_K_emb, self.abs_pos_V_emb, self.time_matrix_K_emb,
                  self.time_matrix_V_emb]
        return sum(lam * torch.norm(t.weight) for t in tables)


def bce_loss(pos_logits, neg_logits, pos):
    """The references' loss: BCEWithLogits mean over positions with a target, positive and
    negative terms averaged separately and added."""
    idx = torch.where(pos != 0)
    bce = torch.nn.BCEWithLogitsLoss()
    return (bce(pos_logits[idx], torch.ones_like(pos_logits[idx])) +
            bce(neg_logits[idx], torch.zeros_like(neg_logits[idx])))


def bce_loss_masked(pos_logits, neg_logits, pos):
    """bce_loss as a masked mean (BCEWithLogits(x, 1) = softplus(-x), (x, 0) = softplus(x)):
    the same value with no data-dependent shapes, the form torch.compile wants (boolean
    indexing makes every batch's count of targets a new shape to compile and record)."""
    mask = (pos != 0).to(pos_logits.dtype)
    n = mask.sum()
    sp = torch.nn.functional.softplus
    return ((sp(-pos_logits) * mask).sum() + (sp(neg_logits) * mask).sum()) / n


# ---- data ---------------------------------------------------------------------------------------

def load_sasrec(path):
    """SASRec.pytorch HEAD's data_partition: 'user item' lines in chronological order; users
    with fewer than 4 interactions keep everything in train."""
    users = {}
    nu = ni = 0
    with open(path) as f:
        for line in f:
            u, i = line.split()
            u, i = int(u), int(i)
            nu, ni = max(nu, u), max(ni, i)
            users.setdefault(u, []).append(i)
    train, valid, test = {}, {}, {}
    for u in range(1, nu + 1):
        s = users.get(u, [])
        if len(s) < 4:
            train[u], valid[u], test[u] = s, [], []
        else:
            train[u], valid[u], test[u] = s[:-2], [s[-2]], [s[-1]]
    return {"train": train, "valid": valid, "test": test, "users": nu, "items": ni,
            "times": None}


def load_tisasrec(path):
    """TiSASRec.pytorch's data_partition: 'user item rating time' (or 3 columns) TSV; rows of
    users or items with fewer than 5 rows dropped (one counting pass); ids re-indexed in
    ascending original order; each user's rows stably sorted by time; times shifted by the
    global minimum and rounded, then per user t' = round((t - min_u) / s_u) + 1 with s_u the
    smallest non-zero gap; users with fewer than 3 interactions are not split."""
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.rstrip("\n").split("\t")
            u, i, t = int(parts[0]), int(parts[1]), float(parts[-1])
            rows.append((u, i, t))
    uc, ic = {}, {}
    for u, i, _ in rows:
        uc[u] = uc.get(u, 0) + 1
        ic[i] = ic.get(i, 0) + 1
    rows = [r for r in rows if uc[r[0]] >= 5 and ic[r[1]] >= 5]
    tmin = min(r[2] for r in rows)
    umap = {u: k + 1 for k, u in enumerate(sorted({r[0] for r in rows}))}
    imap = {i: k + 1 for k, i in enumerate(sorted({r[1] for r in rows}))}
    seqs = {}
    for u, i, t in rows:
        seqs.setdefault(umap[u], []).append((imap[i], int(round(t - tmin))))
    train, valid, test, times = {}, {}, {}, {}
    for u, s in seqs.items():
        s = sorted(s, key=lambda x: x[1])
        ts = [x[1] for x in s]
        gaps = [b - a for a, b in zip(ts, ts[1:]) if b - a != 0]
        scale = min(gaps) if gaps else 1
        lo = min(ts)
        s = [(x[0], int(round((x[1] - lo) / scale)) + 1) for x in s]
        if len(s) < 3:
            train[u], valid[u], test[u] = s, [], []
        else:
            train[u], valid[u], test[u] = s[:-2], [s[-2]], [s[-1]]
    return {"train": train, "valid": valid, "test": test, "users": len(umap), "items": len(imap),
            "times": True}


def time_matrix(time_seq, span):
    """tau_ij = min(|t_i - t_j|, span) for one window (padding has time 0)."""
    t = np.asarray(time_seq, dtype=np.int64)
    return np.minimum(np.abs(t[:, None] - t[None, :]), span).astype(np.int32)


# ---- batch construction -------------------------------------------------------------------------

def _random_neq(rng, lo, hi, s):
    t = rng.randint(lo, hi)
    while t in s:
        t = rng.randint(lo, hi)
    return t


def _sample_sasrec(data, maxlen, u, rng):
    seq = np.zeros([maxlen], dtype=np.int32)
    pos = np.zeros([maxlen], dtype=np.int32)
    neg = np.zeros([maxlen], dtype=np.int32)
    tr = data["train"][u]
    nxt, idx, ts = tr[-1], maxlen - 1, set(tr)
    for i in reversed(tr[:-1]):
        seq[idx], pos[idx] = i, nxt
        neg[idx] = _random_neq(rng, 1, data["items"] + 1, ts)
        nxt, idx = i, idx - 1
        if idx == -1:
            break
    return seq, pos, neg, None


def _sample_tisasrec(data, maxlen, u, rng, relation):
    seq = np.zeros([maxlen], dtype=np.int32)
    pos = np.zeros([maxlen], dtype=np.int32)
    neg = np.zeros([maxlen], dtype=np.int32)
    tr = data["train"][u]
    nxt, idx, ts = tr[-1][0], maxlen - 1, {x[0] for x in tr}
    for i in reversed(tr[:-1]):
        seq[idx], pos[idx] = i[0], nxt
        if nxt != 0:
            neg[idx] = _random_neq(rng, 1, data["items"] + 1, ts)
        nxt, idx = i[0], idx - 1
        if idx == -1:
            break
    return seq, pos, neg, relation[u]


def relation_cache(data, maxlen, span):
    """TiSASRec's Relation(): the time matrix of every user's training window train[:-1]."""
    out = {}
    for u, tr in data["train"].items():
        ts = np.zeros([maxlen], dtype=np.int64)
        w = [x[1] for x in tr[:-1]][-maxlen:]
        if w:
            ts[maxlen - len(w):] = w
        out[u] = time_matrix(ts, span)
    return out


def batch_stream(data, model, maxlen, batch, seed, span):
    """Endless batches, each (seq, pos, neg, time_matrices or None): SASRec HEAD walks a
    permutation of the users reshuffled every U draws (a user with <= 1 training item is swapped
    for a random one); TiSASRec draws users uniformly with replacement."""
    rng = np.random.RandomState(seed)
    nu = data["users"]
    if model == "tisasrec":
        rel = relation_cache(data, maxlen, span)
        while True:
            rows = []
            for _ in range(batch):
                u = rng.randint(1, nu + 1)
                while len(data["train"][u]) <= 1:
                    u = rng.randint(1, nu + 1)
                rows.append(_sample_tisasrec(data, maxlen, u, rng, rel))
            yield tuple(np.array(c) for c in zip(*rows))
    uids = np.arange(1, nu + 1, dtype=np.int32)
    counter = 0
    while True:
        rows = []
        for _ in range(batch):
            if counter % nu == 0:
                rng.shuffle(uids)
            u = int(uids[counter % nu])
            while len(data["train"][u]) <= 1:
                u = rng.randint(1, nu + 1)
            rows.append(_sample_sasrec(data, maxlen, u, rng))
            counter += 1
        seq, pos, neg, _ = zip(*rows)
        yield np.array(seq), np.array(pos), np.array(neg), None


def _producer(q, data, model, maxlen, batch, seed, span):
    torch.set_num_threads(1)
    for b in batch_stream(data, model, maxlen, batch, seed, span):
        q.put(b)


class Sampler:
    """pmixer's WarpSampler with one worker process (see the module comment)."""

    def __init__(self, data, model, maxlen, batch, seed, span):
        ctx = mp.get_context("fork")
        self.q = ctx.Queue(maxsize=10)
        self.p = ctx.Process(target=_producer, args=(self.q, data, model, maxlen, batch, seed,
                                                     span), daemon=True)
        self.p.start()

    def next_batch(self):
        return self.q.get()

    def close(self):
        self.p.terminate()
        self.p.join()


# ---- evaluation ---------------------------------------------------------------------------------

def evaluate(model, data, maxlen, split, kind, span, rng, chunk=256, full=False):
    """The references' sampled protocol, (NDCG@10, HR@10): input = the last maxlen of train
    (valid) or train + valid (test); candidates = target + 100 uniform draws rejected while in
    train (SASRec: and not the valid item on the test split; TiSASRec: and not the target nor,
    on the test split, the valid item), ranked with the references' double argsort. Users are
    scored in chunks. full=True returns ((NDCG@10, HR@10) sampled, (NDCG@10, HR@10) under full
    ranking, see the module comment); the sampled draws are the same either way."""
    ni = data["items"]
    seqs, times, cands, hists = [], [], [], []
    for u in range(1, data["users"] + 1):
        tr = data["train"].get(u, [])
        if len(tr) < 1 or len(data[split].get(u, [])) < 1:
            continue
        hist = list(tr) + (list(data["valid"][u]) if split == "test" else [])
        hist = hist[-maxlen:]
        seq = np.zeros([maxlen], dtype=np.int64)
        ts = np.zeros([maxlen], dtype=np.int64)
        if kind == "tisasrec":
            seq[maxlen - len(hist):] = [x[0] for x in hist]
            ts[maxlen - len(hist):] = [x[1] for x in hist]
            rated = {x[0] for x in tr} | {data["valid"][u][0][0]}
            if split == "test":
                rated.add(data["test"][u][0][0])
            target = data[split][u][0][0]
        else:
            seq[maxlen - len(hist):] = hist
            rated = set(tr)
            if split == "test":
                rated.add(data["valid"][u][0])
            target = data[split][u][0]
        rated.add(0)
        cand = [target]
        for _ in range(100):
            t = rng.randint(1, ni + 1)
            while t in rated:
                t = rng.randint(1, ni + 1)
            cand.append(t)
        seqs.append(seq)
        times.append(ts)
        cands.append(cand)
        if full:
            seen = [x[0] for x in tr] if kind == "tisasrec" else list(tr)
            if split == "test":
                seen.append(data["valid"][u][0][0] if kind == "tisasrec" else data["valid"][u][0])
            hists.append((target, seen))
    ndcg = hr = fndcg = fhr = 0.0
    with torch.no_grad():
        for k in range(0, len(seqs), chunk):
            s = torch.tensor(np.array(seqs[k:k + chunk]))
            c = torch.tensor(np.array(cands[k:k + chunk]))
            tm = None
            if kind == "tisasrec":
                tm = torch.tensor(np.array([time_matrix(t, span) for t in times[k:k + chunk]]),
                                  dtype=torch.long)
            final = model.final_features(s, tm)
            # predict()'s scores (the same op, so exact ties stay exact)
            scores = -(model.item_emb(c) * final.unsqueeze(1)).sum(-1)
            ranks = scores.argsort(dim=1).argsort(dim=1)[:, 0]
            for r in ranks.tolist():
                if r < 10:
                    ndcg += 1.0 / math.log2(r + 2)
                    hr += 1.0
            if not full:
                continue
            for row, (target, seen) in zip(final @ model.item_emb.weight.T, hists[k:k + chunk]):
                keep = torch.ones(ni + 1, dtype=torch.bool)
                keep[0] = False
                keep[torch.tensor(seen, dtype=torch.long)] = False
                keep[target] = False
                r = int(((row >= row[target]) & keep).sum())
                if r < 10:
                    fndcg += 1.0 / math.log2(r + 2)
                    fhr += 1.0
    n = max(len(seqs), 1)
    if full:
        return (ndcg / n, hr / n), (fndcg / n, fhr / n)
    return ndcg / n, hr / n


# ---- training -----------------------------------------------------------------------------------

def build(kind, data, a):
    if kind == "tisasrec":
        m = TiSASRec(data["items"], a.maxlen, a.hidden_units, a.num_heads, a.num_blocks,
                     a.dropout, a.time_span)
    else:
        m = SASRec(data["items"], a.maxlen, a.hidden_units, a.num_heads, a.num_blocks, a.dropout,
                   "pre_ln" if a.norm_first else "post_ln")
    m.init_weights()
    return m


def forward_loss(model, seq_t, pos_t, neg_t, tm_t, l2, loss_fn=bce_loss):
    """The step's forward: the model, BCE and the l2_emb penalty."""
    pl, nl = model(seq_t, pos_t, neg_t, tm_t)
    loss = loss_fn(pl, nl, pos_t)
    if l2 > 0:
        loss = loss + model.l2_penalty(l2)
    return loss


def train_step(model, opt, batch, l2, device="cpu", fwd=forward_loss):
    """One optimizer step of the references: forward, BCE + l2_emb, backward, Adam. The batch is
    copied to device per step, as the references do (float(loss) waits for the step). fwd is
    forward_loss, or its torch.compile'd form."""
    seq, pos, neg, tm = batch
    seq_t, pos_t, neg_t = (torch.as_tensor(x, dtype=torch.long, device=device)
                           for x in (seq, pos, neg))
    tm_t = torch.as_tensor(tm, dtype=torch.long, device=device) if tm is not None else None
    opt.zero_grad()
    loss = fwd(model, seq_t, pos_t, neg_t, tm_t, l2)
    loss.backward()
    opt.step()
    return float(loss.detach()), int((pos != 0).sum())


def emit(obj):
    print(json.dumps(obj), flush=True)


def cmd_train(a):
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    kind = a.model
    data = load_tisasrec(a.dataset) if kind == "tisasrec" else load_sasrec(a.dataset)
    if a.l2_emb is None:
        a.l2_emb = 5e-5 if kind == "tisasrec" else 0.0
    model = build(kind, data, a).to(a.device)
    model.train()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.98))
    nu = data["users"]
    # num_batch of the references: ceil(U / B) (SASRec HEAD), floor(U / B) (TiSASRec)
    per_epoch = (nu - 1) // a.batch_size + 1 if kind == "sasrec" else max(nu // a.batch_size, 1)
    sampler = Sampler(data, kind, a.maxlen, a.batch_size, a.seed, a.time_span)
    eval_rng = np.random.RandomState(a.seed + 1)
    emit({"event": "start", "model": kind, "users": nu, "items": data["items"],
          "steps_per_epoch": per_epoch, "threads": torch.get_num_threads(),
          "torch": torch.__version__})
    fwd = forward_loss
    if a.compile != "none":
        # torch.compile of the forward and the loss (the backward is compiled with it), the
        # loss as a masked mean so that every batch has the same shapes; Adam stays eager. The
        # compilation happens in the warm-up steps.
        def forward_loss_static(model, seq_t, pos_t, neg_t, tm_t, l2):
            return forward_loss(model, seq_t, pos_t, neg_t, tm_t, l2, bce_loss_masked)
        fwd = torch.compile(forward_loss_static,
                            mode=None if a.compile == "default" else a.compile)
    # warm-up steps (first-call allocations, the sampler's first batches, compilation) are not
    # timed
    tw0 = time.time()
    for _ in range(a.warmup):
        train_step(model, opt, sampler.next_batch(), a.l2_emb, a.device, fwd)
    if a.warmup:
        emit({"event": "warmup", "steps": a.warmup, "seconds": time.time() - tw0,
              "compile": a.compile})
    if a.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats(a.device)
    steps = 0
    t_all = time.time()
    for epoch in range(1, a.epochs + 1):
        t0 = time.time()
        t_wait = 0.0
        positions = 0
        loss_sum = 0.0
        n = 0
        for _ in range(per_epoch):
            if a.max_steps and steps >= a.max_steps:
                break
            tw = time.time()
            batch = sampler.next_batch()
            t_wait += time.time() - tw
            loss, npos = train_step(model, opt, batch, a.l2_emb, a.device, fwd)
            positions += npos
            loss_sum += loss
            n += 1
            steps += 1
        dt = time.time() - t0
        ev = {"event": "epoch", "epoch": epoch, "steps": n, "positions": positions,
              "train_seconds": dt, "sample_wait_seconds": t_wait, "loss": loss_sum / max(n, 1)}
        if a.device.startswith("cuda"):
            ev["peak_bytes"] = torch.cuda.max_memory_allocated(a.device)
        emit(ev)
        if a.max_steps and steps >= a.max_steps:
            break
        if a.eval_every and epoch % a.eval_every == 0:
            model.eval()
            te = time.time()
            model.cpu()  # evaluate() builds CPU tensors; parameters move in place and back
            ev = {"event": "eval", "epoch": epoch}
            for split in ("valid", "test"):
                r = evaluate(model, data, a.maxlen, split, kind, a.time_span, eval_rng,
                             full=a.eval != "sampled")
                if a.eval == "sampled":
                    ev[split] = list(r)
                else:
                    ev[split + "_full"] = list(r[1])
                    if a.eval == "both":
                        ev[split] = list(r[0])
            model.to(a.device)
            ev["seconds"] = time.time() - te
            emit(ev)
            model.train()
    sampler.close()
    emit({"event": "done", "steps": steps, "seconds": time.time() - t_all})


def main(argv):
    ap = argparse.ArgumentParser(prog="torch_ref.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train")
    t.add_argument("--model", choices=["sasrec", "tisasrec"], required=True)
    t.add_argument("--dataset", required=True)
    t.add_argument("--batch_size", type=int, default=128)
    t.add_argument("--lr", type=float, default=0.001)
    t.add_argument("--maxlen", type=int, default=200)
    t.add_argument("--hidden_units", type=int, default=50)
    t.add_argument("--num_blocks", type=int, default=2)
    t.add_argument("--num_heads", type=int, default=1)
    t.add_argument("--dropout", type=float, default=0.2)
    t.add_argument("--l2_emb", type=float, default=None)
    t.add_argument("--time_span", type=int, default=256)
    t.add_argument("--norm_first", action="store_true")
    t.add_argument("--epochs", type=int, default=1)
    t.add_argument("--max_steps", type=int, default=0)
    t.add_argument("--warmup", type=int, default=0)
    t.add_argument("--eval_every", type=int, default=0)
    t.add_argument("--eval", choices=["sampled", "full", "both"], default="sampled",
                   help="protocols (full ranking as ctrain defines it; default sampled)")
    t.add_argument("--threads", type=int, default=1)
    t.add_argument("--seed", type=int, default=42)
    t.add_argument("--compile", default="none",
                   choices=["none", "default", "reduce-overhead", "max-autotune"],
                   help="torch.compile the forward and loss in this mode (compiled during the "
                   "warm-up steps; give --warmup)")
    t.add_argument("--device", default="cpu", help="cpu, cuda, cuda:N (training only; the "
                   "evaluation runs on the CPU copy of the model)")
    a = ap.parse_args(argv)
    if a.cmd == "train":
        cmd_train(a)


if __name__ == "__main__":
    main(sys.argv[1:])
