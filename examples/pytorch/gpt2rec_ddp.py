#!/usr/bin/env python3
"""gpt2rec_ddp.py - a recommender whose item vectors add a GPT-2 embedding of the item's text
to an item ID embedding, trained with the BPR loss under DistributedDataParallel.

    torchrun --nproc_per_node=4 gpt2rec_ddp.py --dataset ml-1m/ratings.dat \\
        --item_text ml-1m/movies.dat --gpt2_path models/gpt2 --use_cache
    python gpt2rec_ddp.py --dataset ml-100k/u.data --item_text ml-100k/u.item   # one process
    python gpt2rec_ddp.py --smoke      # synthetic ratings and titles, tiny model, three epochs
    python gpt2rec_ddp.py --dataset ml-100k/u.data --id_only   # no text side: matrix factorisation

Data: --dataset is MovieLens ratings: ml-1m's ratings.dat (user::item::rating::time), ml-100k's
u.data (tab-separated user, item, rating, time) or "user item" lines in time order. Every
rating counts as an interaction. Each user's interactions, in time order, are split by --split
(default 0.8,0.1,0.1) into training, validation and test. --item_text gives each item's text,
"title | genres", from ml-100k's u.item or ml-1m's movies.dat.

Model: score(u, i) = <user_u, item_i + W text_i>, with embeddings of --embed_dim and text_i
the mean of GPT-2's last hidden states over the item's text (--id_only: no text side,
score(u, i) = <user_u, item_i>, --item_text not needed). GPT-2 is GPT2Model from a local
folder (--gpt2_path, with its tokenizer), or a small randomly initialised GPT2Config with a
byte-level BPE tokenizer trained on the item texts (tokenizers library). --use_cache computes
every text_i once with GPT-2 frozen (fast; the first phase); without it GPT-2 is fine-tuned
with the rest (the second phase), at --text_lr. BPR loss with one sampled negative (an item the
user has not rated in training) per interaction; --batch_size is global (split over the
processes).

Evaluation ranks all items for each user, leaving out the items of the user's training split
(and, for the test, of the validation split): HR@10, NDCG@10, Recall@20 and NDCG@20, beside a
popularity baseline (items ranked by their training count). Rank 0 writes
SAVE_DIR/epoch_{e}_step_{s}.pt after every epoch and best_model.pt (best validation NDCG@10); at
the end the best model is evaluated on the test split. --resume auto (the default) continues
from the newest epoch checkpoint. --eval_only --checkpoint FILE evaluates a saved model; its
state may carry DataParallel/DDP's "module." prefix or not. --export_init FILE writes the initial
weights (before any resume or --init_from) as safetensors under the state_dict names, the form
ctrain --model gpt2rec --state_dict_path starts from.
"""
import argparse
import hashlib
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_common as dc  # noqa: E402

ML100K_GENRES = ["unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime",
                 "Documentary", "Drama", "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery",
                 "Romance", "Sci-Fi", "Thriller", "War", "Western"]
KS = (10, 20)


# ---- data ---------------------------------------------------------------------------------

def read_ratings(path):
    """(users, items, times) as int64 numpy arrays of raw ids, in file order."""
    users, items, times = [], [], []
    if not os.path.isfile(path):
        raise SystemExit("error: --dataset %s: no such file" % path)
    with open(path, encoding="latin-1") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            parts = line.split("::") if "::" in line else line.split()
            try:
                u, i = int(parts[0]), int(parts[1])
                t = int(parts[3]) if len(parts) >= 4 else lineno
            except (ValueError, IndexError):
                raise SystemExit("error: --dataset %s:%d: expected user, item[, rating, time], "
                                 "got %r" % (path, lineno, line[:60]))
            users.append(u)
            items.append(i)
            times.append(t)
    if not users:
        raise SystemExit("error: --dataset %s: no ratings" % path)
    return np.array(users), np.array(items), np.array(times)


def read_item_text(path):
    """{raw item id: "title | genres"} from u.item (ml-100k) or movies.dat (ml-1m)."""
    out = {}
    if not os.path.isfile(path):
        raise SystemExit("error: --item_text %s: no such file" % path)
    with open(path, encoding="latin-1") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                if "::" in line:  # movies.dat: id::Title::Genre|Genre
                    mid, title, genres = line.split("::")[:3]
                    out[int(mid)] = "%s | %s" % (title.strip(), genres.strip())
                else:  # u.item: id|title|date|video date|url|19 genre flags
                    f_ = line.split("|")
                    flags = f_[-19:]
                    genres = [g for g, x in zip(ML100K_GENRES, flags) if x.strip() == "1"]
                    out[int(f_[0])] = "%s | %s" % (f_[1].strip(), "|".join(genres))
            except (ValueError, IndexError):
                raise SystemExit("error: --item_text %s:%d: expected u.item or movies.dat "
                                 "fields, got %r" % (path, lineno, line[:60]))
    return out


def split_per_user(users, times, fractions):
    """0/1/2 (train/validation/test) per interaction: each user's interactions in time order
    (file order among equal times), cut at the fractions."""
    part = np.zeros(len(users), dtype=np.int64)
    order = np.lexsort((np.arange(len(users)), times, users))
    bounds = np.flatnonzero(np.diff(users[order])) + 1
    for grp in np.split(order, bounds):
        n = len(grp)
        n_tr = max(1, int(round(n * fractions[0])))
        n_va = int(round(n * fractions[1]))
        n_va = min(n_va, n - n_tr)
        part[grp[n_tr: n_tr + n_va]] = 1
        part[grp[n_tr + n_va:]] = 2
    return part


def make_smoke_data(d, seed=0, n_users=150, n_items=120):
    """Synthetic ml-100k-style u.data and u.item under d: items have one or two of five
    genres, users prefer one or two, and most of a user's ratings are of preferred genres."""
    os.makedirs(d, exist_ok=True)
    r = np.random.default_rng(seed)
    genres = ["Action", "Comedy", "Drama", "Horror", "Romance"]
    words = ["Silent", "River", "Night", "Golden", "City", "Last", "Dream", "Storm", "Winter",
             "Secret", "Road", "Star", "Lost", "Heart", "Fire", "Shadow", "Blue", "King"]
    item_g = [sorted(set(r.choice(5, size=int(r.integers(1, 3))).tolist()))
              for _ in range(n_items)]
    pop = r.zipf(1.6, n_items).astype(float)
    tmp = ".tmp.%d" % os.getpid()
    with open(os.path.join(d, "u.item" + tmp), "w", encoding="latin-1") as f:
        for i in range(n_items):
            title = "The %s %s (%d)" % (r.choice(words), r.choice(words), 1970 + r.integers(30))
            flags = ["0"] * 19
            for g in item_g[i]:
                flags[ML100K_GENRES.index(genres[g])] = "1"
            f.write("%d|%s|01-Jan-1995||http://example.invalid/|%s\n" % (
                i + 1, title, "|".join(flags)))
    with open(os.path.join(d, "u.data" + tmp), "w") as f:
        t = 880000000
        for u in range(n_users):
            like = set(r.choice(5, size=int(r.integers(1, 3))).tolist())
            w = np.array([pop[i] * (8.0 if like & set(item_g[i]) else 0.3)
                          for i in range(n_items)])
            n = int(r.integers(20, 45))
            for i in r.choice(n_items, size=n, replace=False, p=w / w.sum()):
                t += int(r.integers(1, 5000))
                f.write("%d\t%d\t%d\t%d\n" % (u + 1, i + 1, r.integers(1, 6), t))
    os.replace(os.path.join(d, "u.item" + tmp), os.path.join(d, "u.item"))
    os.replace(os.path.join(d, "u.data" + tmp), os.path.join(d, "u.data"))


# ---- text side ----------------------------------------------------------------------------

class TextTokenizer:
    """GPT-2's tokenizer from --gpt2_path, or a byte-level BPE trained on the item texts (by
    rank 0, saved under SAVE_DIR/tokenizer so a resumed job and the other ranks use the same)."""

    def __init__(self, gpt2_path, save_dir, texts, vocab_size, c, init_from=None):
        if gpt2_path:
            from transformers import AutoTokenizer
            t = AutoTokenizer.from_pretrained(gpt2_path)
            self.encode = lambda xs: t(list(xs), add_special_tokens=False)["input_ids"]
            self.pad_id = t.pad_token_id if t.pad_token_id is not None else t.eos_token_id
            self.vocab_size = len(t)
            return
        import json
        from tokenizers import ByteLevelBPETokenizer
        # Rank 0 trains it (or reads the one a previous attempt saved) and sends it to the
        # others, so that every node has the same one without sharing a folder.
        d = os.path.join(save_dir, "tokenizer")
        vocab, merges = os.path.join(d, "vocab.json"), os.path.join(d, "merges.txt")
        content = None
        if c.main:
            src = os.path.join(os.path.dirname(os.path.abspath(init_from or ".")), "tokenizer")
            if init_from and not os.path.isfile(vocab) and \
                    os.path.isfile(os.path.join(src, "vocab.json")):
                # The tokenizer of the model we start from (its GPT-2 inputs).
                os.makedirs(d, exist_ok=True)
                for n in ("vocab.json", "merges.txt"):
                    with open(os.path.join(src, n), "rb") as f:
                        data = f.read()
                    with open(os.path.join(d, n) + ".tmp", "wb") as f:
                        f.write(data)
                    os.replace(os.path.join(d, n) + ".tmp", os.path.join(d, n))
            if not (os.path.isfile(vocab) and os.path.isfile(merges)):
                t = ByteLevelBPETokenizer()
                t.train_from_iterator(texts, vocab_size=vocab_size, min_frequency=2,
                                      special_tokens=["<|endoftext|>"], show_progress=False)
                tmp = d + ".tmp.%d" % os.getpid()
                os.makedirs(tmp, exist_ok=True)
                t.save_model(tmp)
                os.makedirs(d, exist_ok=True)
                for n in ("vocab.json", "merges.txt"):
                    os.replace(os.path.join(tmp, n), os.path.join(d, n))
                os.rmdir(tmp)
            with open(vocab, encoding="utf-8") as f:
                v = json.load(f)
            with open(merges, encoding="utf-8") as f:
                m = [tuple(x.split(" ")) for x in f.read().splitlines()
                     if x and not x.startswith("#version")]
            content = (v, m)
        v, m = dc.broadcast_obj(c, content)
        t = ByteLevelBPETokenizer(v, m)
        self.encode = lambda xs: [e.ids for e in t.encode_batch(list(xs))]
        self.pad_id = t.token_to_id("<|endoftext|>")
        self.vocab_size = t.get_vocab_size()


def token_matrix(tok, texts, max_len):
    ids = [x[:max_len] or [tok.pad_id] for x in tok.encode(texts)]
    n = max(len(x) for x in ids)
    m = torch.zeros((len(ids), n), dtype=torch.bool)
    t = torch.full((len(ids), n), tok.pad_id, dtype=torch.long)
    for j, x in enumerate(ids):
        t[j, : len(x)] = torch.tensor(x)
        m[j, : len(x)] = True
    return t, m


def build_gpt2(a, vocab_size, pad_id):
    from transformers import GPT2Config, GPT2Model
    if a.gpt2_path:
        return GPT2Model.from_pretrained(a.gpt2_path)
    conf = GPT2Config(vocab_size=vocab_size, n_positions=max(64, a.max_text_len),
                      n_embd=a.gpt2_dim, n_layer=a.gpt2_layers, n_head=a.gpt2_heads,
                      bos_token_id=pad_id, eos_token_id=pad_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(a.seed + 17)
        return GPT2Model(conf)


def mean_pool(gpt2, ids, mask):
    h = gpt2(input_ids=ids, attention_mask=mask.long()).last_hidden_state
    m = mask.unsqueeze(-1).to(h.dtype)
    return (h * m).sum(1) / m.sum(1).clamp(min=1)


@torch.no_grad()
def text_embeddings(gpt2, tokens, tmask, device, chunk=256):
    """Every item's text embedding (the --use_cache phase), GPT-2 in evaluation mode."""
    gpt2.eval()
    return torch.cat([mean_pool(gpt2, tokens[s: s + chunk].to(device),
                                tmask[s: s + chunk].to(device)).float().cpu()
                      for s in range(0, tokens.shape[0], chunk)])


def bpr_step(ddp, opt, u, p, n, l2):
    """One optimizer step on the interactions (u, p) with negatives n: BPR plus the L2 penalty
    on the batch's vectors. Returns the BPR loss (the number logged)."""
    sp, sn, eu, ep, en = ddp(u, p, n)
    loss = -F.logsigmoid(sp - sn).mean()
    reg = l2 * (eu.pow(2).sum() + ep.pow(2).sum() + en.pow(2).sum()) / u.shape[0]
    opt.zero_grad(set_to_none=True)
    (loss + reg).backward()
    opt.step()
    return loss.item()


class Recommender(nn.Module):
    def __init__(self, n_users, n_items, dim, text_dim, gpt2, tokens, mask, cache):
        super().__init__()
        self.user = nn.Embedding(n_users, dim)
        self.item = nn.Embedding(n_items, dim)
        nn.init.normal_(self.user.weight, std=0.1)
        nn.init.normal_(self.item.weight, std=0.1)
        self.proj = nn.Linear(text_dim, dim) if text_dim > 0 else None  # None: --id_only
        self.gpt2 = gpt2  # None with the cache
        self.register_buffer("tokens", tokens, persistent=False)
        self.register_buffer("tmask", mask, persistent=False)
        self.register_buffer("cache", cache, persistent=False)

    def text(self, items):
        if self.gpt2 is None:
            return self.cache[items]
        # Fine-tuning: GPT-2 on these items' texts, in four groups of similar length so that
        # little of the work is padding.
        lens = self.tmask[items].sum(1)
        order = lens.argsort()
        out = []
        for grp in order.chunk(4):
            it = items[grp]
            n = int(lens[grp].max())
            out.append(mean_pool(self.gpt2, self.tokens[it, :n], self.tmask[it, :n]))
        pooled = torch.cat(out)
        return pooled[order.argsort()]

    def item_vectors(self, items):
        if self.proj is None:
            return self.item(items)
        return self.item(items) + self.proj(self.text(items))

    def forward(self, users, pos, neg):
        both = torch.cat([pos, neg])
        uniq, inv = torch.unique(both, return_inverse=True)
        v = self.item_vectors(uniq)[inv]
        u = self.user(users)
        vp, vn = v[: pos.shape[0]], v[pos.shape[0]:]
        return (u * vp).sum(-1), (u * vn).sum(-1), u, vp, vn

    @torch.no_grad()
    def all_items(self, chunk=1024):
        n = self.item.num_embeddings
        return torch.cat([self.item_vectors(torch.arange(s, min(n, s + chunk),
                                                         device=self.item.weight.device))
                          for s in range(0, n, chunk)])


# ---- evaluation ---------------------------------------------------------------------------

def rank_metrics(scores, targets):
    """Sums over users of HR@10, NDCG@10, Recall@20, NDCG@20. scores [B, I] with excluded
    items at -inf; targets: list of B LongTensors."""
    top = scores.topk(max(KS), dim=1).indices.cpu()
    disc = 1.0 / torch.log2(torch.arange(max(KS), dtype=torch.float64) + 2)
    s = torch.zeros(4, dtype=torch.float64)
    for b, t in enumerate(targets):
        hit = torch.isin(top[b], t).double()
        for j, k in enumerate(KS):
            dcg = (hit[:k] * disc[:k]).sum()
            idcg = disc[: min(k, t.numel())].sum()
            if k == 10:
                s[0] += float(hit[:k].any())
                s[1] += dcg / idcg
            else:
                s[2] += hit[:k].sum() / t.numel()
                s[3] += dcg / idcg
    return s


@torch.no_grad()
def scorer(model):
    """users -> scores [B, I] of the (unwrapped) model, all item vectors computed once."""
    items = model.all_items()
    return lambda u: model.user(u) @ items.T


def evaluate(c, model_scores, eval_users, targets, exclude, batch=256):
    """Full ranking over all items for this rank's share of eval_users (DistributedSampler,
    padding not counted); model_scores(users) -> [B, I]. Returns the four metrics averaged over
    all users."""
    sampler = DistributedSampler(range(len(eval_users)), c.world, c.rank, shuffle=False) \
        if c.distributed else None
    pos = list(sampler) if sampler is not None else list(range(len(eval_users)))
    real = dc.real_positions(len(eval_users), c, 0, len(pos))
    s = torch.zeros(5, dtype=torch.float64)
    for b0 in range(0, len(pos), batch):
        idx = [p for j, p in enumerate(pos[b0: b0 + batch]) if real[b0 + j] > 0]
        if not idx:
            continue
        users = eval_users[idx]
        sc = model_scores(users.to(c.device)).float()
        sc[exclude[users].to(sc.device)] = float("-inf")
        s[:4] += rank_metrics(sc, [targets[int(u)] for u in users])
        s[4] += len(idx)
    tot = dc.all_sum(c, s.tolist())
    n = max(1.0, tot[4])
    return {"HR@10": tot[0] / n, "NDCG@10": tot[1] / n, "Recall@20": tot[2] / n,
            "NDCG@20": tot[3] / n}


def fmt(m, prefix=""):
    return " ".join("%s%s=%.4f" % (prefix, k, v) for k, v in m.items())


# ---- main ---------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", help="ratings: ratings.dat, u.data, or 'user item' lines")
    ap.add_argument("--item_text", help="u.item (ml-100k) or movies.dat (ml-1m)")
    ap.add_argument("--split", default="0.8,0.1,0.1", help="train,validation,test per user")
    ap.add_argument("--embed_dim", type=int, default=64)
    ap.add_argument("--gpt2_path", help="local GPT-2 folder (model and tokenizer); default: a "
                    "small random GPT-2")
    ap.add_argument("--gpt2_dim", type=int, default=64, help="the random GPT-2's width")
    ap.add_argument("--gpt2_layers", type=int, default=2)
    ap.add_argument("--gpt2_heads", type=int, default=4)
    ap.add_argument("--bpe_vocab", type=int, default=2000, help="the random GPT-2's BPE size")
    ap.add_argument("--max_text_len", type=int, default=24)
    ap.add_argument("--use_cache", action="store_true",
                    help="text embeddings computed once with GPT-2 frozen (else fine-tuned)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch_size", type=int, default=2048, help="global, split over ranks")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--text_lr", type=float, default=1e-4, help="GPT-2's learning rate")
    ap.add_argument("--l2", type=float, default=1e-4,
                    help="L2 penalty on the batch's user and item vectors")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--save_dir", default="checkpoints/gpt2rec")
    ap.add_argument("--resume", default="auto", help="auto (the default), none, or a file")
    ap.add_argument("--init_from", help="start from this model (e.g. the --use_cache phase's "
                    "best_model.pt, to fine-tune GPT-2 from there); 'module.' prefix or not")
    ap.add_argument("--eval_only", action="store_true", help="evaluate --checkpoint and stop")
    ap.add_argument("--checkpoint", help="with --eval_only: a checkpoint or best_model.pt")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU even with GPUs")
    ap.add_argument("--smoke", action="store_true", help="synthetic ratings and titles under "
                    "./gpt2rec_smoke, tiny model, three short epochs")
    ap.add_argument("--id_only", action="store_true",
                    help="no text side: user and item ID embeddings alone")
    ap.add_argument("--export_init", help="write the initial weights to this safetensors file")
    a = ap.parse_args()
    if a.smoke:
        for k, v in dict(epochs=3, batch_size=256, embed_dim=16, gpt2_dim=32, gpt2_layers=1,
                         gpt2_heads=2, bpe_vocab=400, lr=5e-3, text_lr=1e-3).items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
        if a.save_dir == ap.get_default("save_dir"):
            a.save_dir = "gpt2rec_smoke/checkpoints"
    elif not a.dataset or not (a.item_text or a.id_only):
        ap.error("--dataset and --item_text are required (or --smoke)")
    try:
        fractions = [float(x) for x in a.split.split(",")]
        assert len(fractions) == 3 and all(x >= 0 for x in fractions) and fractions[0] > 0 \
            and abs(sum(fractions) - 1) < 1e-6
    except (ValueError, AssertionError):
        ap.error("--split %s: expected three fractions summing to 1, e.g. 0.8,0.1,0.1" % a.split)
    if a.eval_only and not a.checkpoint:
        ap.error("--eval_only needs --checkpoint")

    c = dc.setup(cpu=a.cpu)
    log = dc.Log(c, a.save_dir)
    log("GPT-2 recommender: %s" % dc.describe(c))
    if c.device.type == "cpu" and not a.cpu:
        log.warn("no GPU visible: training on the CPU (slow at full size)")
    if a.smoke:
        a.dataset, a.item_text = "gpt2rec_smoke/data/u.data", "gpt2rec_smoke/data/u.item"
        if c.local_main and not (os.path.isfile(a.dataset) and os.path.isfile(a.item_text)):
            make_smoke_data("gpt2rec_smoke/data")  # the same files on every node
        dc.barrier(c)
    if a.batch_size % c.world:
        log.warn("--batch_size %d is not a multiple of %d processes; each takes %d" % (
            a.batch_size, c.world, a.batch_size // c.world))
    per_rank = max(1, a.batch_size // c.world)

    # Data: contiguous ids, the per-user split, the training matrix.
    t0 = time.time()
    raw_u, raw_i, times = read_ratings(a.dataset)
    texts_raw = read_item_text(a.item_text) if a.item_text else {}
    uids, users = np.unique(raw_u, return_inverse=True)
    iids, items = np.unique(raw_i, return_inverse=True)  # the rated items are the catalogue
    n_users, n_items = len(uids), len(iids)
    missing = [int(i) for i in iids if int(i) not in texts_raw]
    if missing and not a.id_only:
        log.warn("%d items have no text in %s (e.g. %d); they get their id as text" % (
            len(missing), a.item_text, missing[0]))
    texts = [texts_raw.get(int(i), "item %d" % int(i)) for i in iids]
    part = split_per_user(users, times, fractions)
    users_t, items_t = torch.from_numpy(users), torch.from_numpy(items)
    train_mat = torch.zeros((n_users, n_items), dtype=torch.bool)
    train_mat[users_t[part == 0], items_t[part == 0]] = True
    val_mat = torch.zeros_like(train_mat)
    val_mat[users_t[part == 1], items_t[part == 1]] = True

    def targets_of(p):
        d = {}
        for u, i in zip(users[part == p].tolist(), items[part == p].tolist()):
            d.setdefault(u, []).append(i)
        return {u: torch.tensor(sorted(set(v))) for u, v in d.items()}
    val_t, test_t = targets_of(1), targets_of(2)
    val_users = torch.tensor(sorted(val_t), dtype=torch.long)
    test_users = torch.tensor(sorted(test_t), dtype=torch.long)
    tr_u, tr_i = users_t[part == 0], items_t[part == 0]
    log("%s: %d users, %d items, %d interactions -> %d train, %d validation, %d test "
        "(per user in time order, %s); read in %.1f s" % (
            a.dataset, n_users, n_items, len(users), int((part == 0).sum()),
            int((part == 1).sum()), int((part == 2).sum()), a.split, time.time() - t0))

    # Popularity baseline.
    popularity = torch.bincount(tr_i, minlength=n_items).double()

    def pop_scores(u):
        return popularity.to(u.device).unsqueeze(0).expand(u.shape[0], -1).clone()
    pop_val = evaluate(c, pop_scores, val_users, val_t, train_mat)
    pop_test = evaluate(c, pop_scores, test_users, test_t, train_mat | val_mat)
    log("popularity baseline: validation %s; test %s" % (fmt(pop_val), fmt(pop_test)))

    # Text side.
    if a.id_only:
        tokens = tmask = torch.zeros(0)
        gpt2, text_dim, cache = None, 0, None
    else:
        tok = TextTokenizer(a.gpt2_path, a.save_dir, texts, a.bpe_vocab, c, a.init_from)
        tokens, tmask = token_matrix(tok, texts, a.max_text_len)
        gpt2 = build_gpt2(a, tok.vocab_size, tok.pad_id).to(c.device)
        text_dim = gpt2.config.n_embd
        cache = None
    if a.use_cache and not a.id_only:
        # Phase 1: GPT-2 frozen, every item's text embedded once by rank 0 and cached.
        key = hashlib.sha256(("\n".join(texts) + repr((a.gpt2_path, a.gpt2_dim, a.gpt2_layers,
                              a.gpt2_heads, a.max_text_len, a.seed, tok.vocab_size))).encode()
                             ).hexdigest()[:16]
        cache_file = os.path.join(a.save_dir, "text_cache_%s.pt" % key)
        cache = torch.zeros((n_items, text_dim))
        if c.main:
            if os.path.isfile(cache_file):
                cache = dc.load_checkpoint(c, cache_file, "the text cache")["emb"]
            else:
                t1 = time.time()
                cache = text_embeddings(gpt2, tokens, tmask, c.device)
                dc.save_atomic({"emb": cache}, cache_file)
                log("text embeddings of %d items cached in %s (%.1f s)" % (
                    n_items, cache_file, time.time() - t1))
        if c.distributed:  # every rank gets rank 0's, no shared folder needed
            buf = cache.to(c.device) if c.backend == "nccl" else cache
            dc.dist.broadcast(buf, 0)
            cache = buf.cpu()
        gpt2 = None
    torch.manual_seed(a.seed)
    model = Recommender(n_users, n_items, a.embed_dim, text_dim, gpt2, tokens, tmask,
                        cache if cache is not None else torch.zeros(0)).to(c.device)
    n_gpt2 = sum(p.numel() for p in gpt2.parameters()) if gpt2 is not None else 0
    if a.export_init and c.main:
        from safetensors.torch import save_file
        state = {k: v.detach().float().cpu().contiguous() for k, v in model.state_dict().items()}
        tmp = a.export_init + ".tmp.%d" % os.getpid()
        save_file(state, tmp)
        os.replace(tmp, a.export_init)
        log("initial weights written to %s" % a.export_init)

    if a.eval_only:
        ck = dc.load_checkpoint(c, a.checkpoint)
        state = ck["model"] if isinstance(ck, dict) and "model" in ck else ck
        model.load_state_dict(dc.strip_module(state))
        model.eval()
        log("evaluated %s: validation %s" % (a.checkpoint, fmt(evaluate(
            c, scorer(model), val_users, val_t, train_mat))))
        log("done: test %s popularity %s" % (
            fmt(evaluate(c, scorer(model), test_users, test_t, train_mat | val_mat)),
            fmt(pop_test, "pop_")))
        dc.finish(c)
        return

    groups = [{"params": [p for n, p in model.named_parameters() if not n.startswith("gpt2.")],
               "lr": a.lr}]
    if gpt2 is not None:
        groups.append({"params": list(gpt2.parameters()), "lr": a.text_lr})
    opt = torch.optim.Adam(groups)
    start_epoch, step, best = 1, 0, -1.0
    last_line = None
    path = dc.choose_resume(c, a.resume, a.save_dir, log)
    if a.init_from and not path:
        ck = dc.load_checkpoint(c, a.init_from, "--init_from")
        state = dc.strip_module(ck["model"] if "model" in ck else ck)
        # A --use_cache model has no GPT-2 weights: this model's GPT-2 (the same local one,
        # or the same seeded random one) stays as it is.
        miss, extra = model.load_state_dict(state, strict=False)
        if extra or any(not k.startswith("gpt2.") for k in miss):
            raise SystemExit("error: --init_from %s does not fit this model (missing %s, "
                             "unexpected %s)" % (a.init_from, miss[:3], extra[:3]))
        log("initialised from %s" % a.init_from)
    if path:
        ck = dc.load_checkpoint(c, path)
        model.load_state_dict(dc.strip_module(ck["model"]))
        opt.load_state_dict(ck["optimizer"])
        start_epoch, step, best = ck["epoch"] + 1, ck["step"], ck["best"]
        last_line = ck.get("last_line")
        log("resumed from %s at epoch %d step %d" % (path, ck["epoch"], step))
    ddp = DDP(model, device_ids=[c.device.index] if c.device.type == "cuda" else None) \
        if c.distributed else model

    pairs = TensorDataset(tr_u, tr_i)
    sampler = DistributedSampler(pairs, c.world, c.rank, shuffle=True, seed=a.seed) \
        if c.distributed else None
    loader = DataLoader(pairs, batch_size=per_rank, sampler=sampler, shuffle=sampler is None)
    log("%s text embeddings; model %d parameters (GPT-2 %s: %d); %d processes x %d = %d "
        "interactions per step, %d steps per epoch" % (
            "no" if a.id_only else "cached" if a.use_cache else "fine-tuned",
            sum(p.numel() for p in model.parameters()),
            a.gpt2_path or "random", n_gpt2, c.world, per_rank,
            per_rank * c.world, len(loader)))
    tb = dc.tensorboard(c, a.save_dir, log)

    # The metrics of the last finished epoch (kept in the checkpoints, so a job resumed after
    # its last epoch still ends with them).
    last_line = last_line or "step=%d (nothing trained)" % step
    t_run = time.time()
    for epoch in range(start_epoch, a.epochs + 1):
        model.train()
        if sampler is not None:
            sampler.set_epoch(epoch)
        torch.manual_seed(dc.epoch_seed(a.seed, epoch, c.rank))
        g = torch.Generator().manual_seed(dc.epoch_seed(a.seed + 1, epoch, c.rank))
        t0 = time.time()
        s = [0.0, 0.0]
        for u, p in loader:
            n = torch.randint(n_items, u.shape, generator=g)
            for _ in range(5):  # resample negatives the user has in training
                bad = train_mat[u, n]
                if not bad.any():
                    break
                n[bad] = torch.randint(n_items, (int(bad.sum()),), generator=g)
            u, p, n = u.to(c.device), p.to(c.device), n.to(c.device)
            loss = bpr_step(ddp, opt, u, p, n, a.l2)
            step += 1
            s[0] += loss * u.shape[0]
            s[1] += u.shape[0]
        tr = dc.all_sum(c, s)
        t_train = time.time() - t0
        model.eval()
        val = evaluate(c, scorer(model), val_users, val_t, train_mat)
        last_line = "step=%d train_loss=%.4f %s" % (step, tr[0] / max(1, tr[1]), fmt(val))
        log("epoch %d/%d %s time=%.1fs interactions_per_s=%.1f" % (
            epoch, a.epochs, last_line, time.time() - t0, tr[1] / max(t_train, 1e-9)))
        if tb:
            tb.add_scalar("train/bpr_loss", tr[0] / max(1, tr[1]), epoch)
            for k, v in val.items():
                tb.add_scalar("val/" + k, v, epoch)
            tb.flush()
        if c.main:
            is_best = val["NDCG@10"] > best
            if is_best:
                best = val["NDCG@10"]
                dc.save_atomic({"model": model.state_dict(), "epoch": epoch, "step": step,
                                "val": val, "args": vars(a)},
                               os.path.join(a.save_dir, "best_model.pt"))
            pth = os.path.join(a.save_dir, dc.ckpt_name(epoch, step))
            dc.save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "epoch": epoch, "step": step, "best": best, "world": c.world,
                            "args": vars(a), "last_line": last_line}, pth)
            log("saved %s%s" % (pth, " (best so far: best_model.pt)" if is_best else ""))
        best = dc.broadcast_obj(c, best)

    # The test split, with the best model.
    bp = os.path.join(a.save_dir, "best_model.pt")
    dc.barrier(c)
    if os.path.isfile(bp):
        bk = dc.load_checkpoint(c, bp)
        model.load_state_dict(dc.strip_module(bk["model"]))
        model.eval()
        test = evaluate(c, scorer(model), test_users, test_t, train_mat | val_mat)
        log("test (best model, epoch %d): %s | popularity %s" % (
            bk["epoch"], fmt(test), fmt(pop_test)))
        last_line += " " + fmt(test, "test_")
    if tb:
        tb.close()
    log("done: epochs=%d %s wall=%.1fs" % (a.epochs, last_line, time.time() - t_run))
    dc.finish(c)


if __name__ == "__main__":
    main()
