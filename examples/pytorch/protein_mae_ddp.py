#!/usr/bin/env python3
"""protein_mae_ddp.py - a masked encoder-decoder over protein residues, trained with
DistributedDataParallel on PDB structures.

    torchrun --nproc_per_node=8 protein_mae_ddp.py --pdb_path data/pdb --cache_dir data/cache \\
        --epochs 50 --batch_size 8 --learning_rate 1e-4 --hidden_dim 256 \\
        --num_encoder_layers 3 --num_decoder_layers 3 --mask_ratio 0.15 --save_dir checkpoints
    python protein_mae_ddp.py --pdb_path data/pdb --cache_dir data/cache      # one process
    python protein_mae_ddp.py --smoke     # synthetic PDB files, tiny model, three short epochs

Data: --pdb_path is a PDB file, a folder of them (*.pdb, *.ent, optionally .gz, searched
recursively), or a folder holding a cache made before. ATOM and HETATM records of the first
model give each chain's residue sequence (modified residues such as MSE map to their parent) and
C-alpha coordinates (alternate location A); chains shorter than --min_len are left out. The
parsed chains are written once to CACHE_DIR/proteins.pt (by the first process of each node)
and read from there while the PDB files are unchanged.

Model: a share --mask_ratio of each chain's residues is hidden. The encoder (Transformer layers
whose attention gets a learned bias from the C-alpha distance of every pair of residues) sees
the visible residues only; the decoder sees the encoded residues and a mask token at the hidden
ones, with the distances too, and predicts the hidden residues. With --coord_weight > 0 the
hidden residues' coordinates are hidden as well (no distances to them) and the decoder also
predicts them (mean squared error in A^2, after a random rotation of each chain). Metrics:
masked-residue loss and accuracy on the validation chains, beside the accuracy of always
guessing the most common residue.

--batch_size is per process (GPU). Rank 0 prints, logs (SAVE_DIR/train.log, tensorboard) and
writes SAVE_DIR/epoch_{e}_step_{s}.pt after every epoch and best_model.pt (lowest validation
loss); --resume auto (the default) continues from the newest one, as a restarted job must.
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_common as dc  # noqa: E402

AA = "ACDEFGHIKLMNPQRSTVWY"
THREE_TO_ONE = {"ALA": "A", "CYS": "C", "ASP": "D", "GLU": "E", "PHE": "F", "GLY": "G",
                "HIS": "H", "ILE": "I", "LYS": "K", "LEU": "L", "MET": "M", "ASN": "N",
                "PRO": "P", "GLN": "Q", "ARG": "R", "SER": "S", "THR": "T", "VAL": "V",
                "TRP": "W", "TYR": "Y"}
# Modified residues (HETATM in most files) and their parents.
MODIFIED = {"MSE": "M", "SEP": "S", "TPO": "T", "PTR": "Y", "CSO": "C", "HYP": "P", "MLY": "K",
            "SEC": "C", "PYL": "K", "KCX": "K", "CME": "C", "LLP": "K"}
X_ID, MASK_ID, PAD_ID = 20, 21, 22
N_TOKENS = 23
CACHE_VERSION = 1


# ---- PDB files and the cache --------------------------------------------------------------

def parse_pdb(path):
    """[(chain id, sequence, C-alpha coordinates [L, 3] float32)] of the first model of a PDB
    file; a ValueError naming the file and line for a malformed coordinate record."""
    opener = gzip.open if path.endswith(".gz") else open
    chains = {}
    order = []
    with opener(path, "rt", encoding="latin-1") as f:
        for lineno, line in enumerate(f, 1):
            rec = line[:6]
            if rec.startswith("ENDMDL"):
                break  # the first model only
            if rec not in ("ATOM  ", "HETATM"):
                continue
            if line[12:16].strip() != "CA" or line[16] not in " A1":
                continue
            resn = line[17:20].strip()
            aa = THREE_TO_ONE.get(resn) or MODIFIED.get(resn)
            if aa is None:
                if rec == "HETATM":
                    continue  # a ligand, an ion (calcium's atom is also named CA), a water
                aa = "X"
            try:
                key = (int(line[22:26]), line[26])
                xyz = (float(line[30:38]), float(line[38:46]), float(line[46:54]))
            except ValueError:
                raise ValueError("%s:%d: malformed %s record" % (path, lineno, rec.strip()))
            cid = line[21]
            if cid not in chains:
                chains[cid] = {}
                order.append(cid)
            chains[cid].setdefault(key, (aa, xyz))  # the first CA of a residue
    out = []
    for cid in order:
        res = list(chains[cid].values())
        out.append((cid, "".join(r[0] for r in res),
                    np.array([r[1] for r in res], dtype=np.float32)))
    return out


def find_pdb_files(path):
    if os.path.isfile(path):
        return [path]
    found = []
    for root, _, names in os.walk(path):
        for n in names:
            base = n[:-3] if n.endswith(".gz") else n
            if base.endswith(".pdb") or base.endswith(".ent"):
                found.append(os.path.join(root, n))
    return sorted(found)


def build_cache(pdb_path, cache_dir, min_len, log):
    """Parses every PDB file under pdb_path into cache_dir/proteins.pt, unless the cache there
    was made from the same files (names, sizes, modification times). Returns the cache."""
    cache_file = os.path.join(cache_dir, "proteins.pt")
    files = find_pdb_files(pdb_path) if os.path.exists(pdb_path) else None
    if files is None and not os.path.isfile(cache_file):
        raise SystemExit("error: --pdb_path %s: no such file or folder" % pdb_path)
    sources = [[os.path.relpath(p, pdb_path) if os.path.isdir(pdb_path) else os.path.basename(p),
                os.path.getsize(p), int(os.path.getmtime(p))] for p in files or []]
    if os.path.isfile(cache_file):
        try:
            cache = dc.load(cache_file)
        except Exception as e:  # a damaged cache is made again
            log("%s unreadable (%s): parsing the PDB files again" % (
                cache_file, (str(e).splitlines() or ["?"])[0][:120]))
            cache = {}
        if cache.get("version") == CACHE_VERSION and (not files or cache["sources"] == sources) \
                and cache.get("min_len") == min_len:
            log("read %d chains from %s" % (len(cache["names"]), cache_file))
            return cache
    if not files:
        raise SystemExit("error: --pdb_path %s: no PDB files (*.pdb, *.ent, .gz) and no usable "
                         "cache in --cache_dir %s" % (pdb_path, cache_dir))
    t0 = time.time()
    names, seqs, coords, short, empty = [], [], [], 0, 0
    for p in files:
        try:
            chains = parse_pdb(p)
        except (OSError, ValueError, EOFError) as e:
            raise SystemExit("error: %s" % e)
        if not chains:
            empty += 1
        for cid, seq, xyz in chains:
            if len(seq) < min_len:
                short += 1
                continue
            names.append("%s:%s" % (os.path.basename(p), cid))
            seqs.append(torch.tensor([AA.find(a) if a in AA else X_ID for a in seq],
                                     dtype=torch.uint8))
            coords.append(torch.from_numpy(xyz))
    if not names:
        raise SystemExit("error: %s: no chain of at least %d residues in %d files" % (
            pdb_path, min_len, len(files)))
    cache = {"version": CACHE_VERSION, "sources": sources, "min_len": min_len, "names": names,
             "seqs": seqs, "coords": coords}
    dc.save_atomic(cache, cache_file)
    log("parsed %d PDB files in %.1f s: %d chains (%d shorter than %d left out, %d files "
        "without protein) -> %s" % (len(files), time.time() - t0, len(names), short, min_len,
                                   empty, cache_file))
    return cache


class Chains(Dataset):
    """Chains cropped to max_len (a random window in training, the first one otherwise) with
    their masks, drawn from the sample's own seed so that every epoch is reproducible."""

    def __init__(self, cache, idx, max_len, mask_ratio, seed, train):
        self.cache, self.idx = cache, idx
        self.max_len, self.mask_ratio, self.seed, self.train = max_len, mask_ratio, seed, train
        self.epoch = 0

    def __len__(self):
        return len(self.idx)

    def __getitem__(self, k):
        i = self.idx[k]
        seq = self.cache["seqs"][i].long()
        xyz = self.cache["coords"][i].float()
        g = torch.Generator().manual_seed(dc.epoch_seed(self.seed, self.epoch if self.train
                                                        else 0, i))
        n = seq.shape[0]
        if n > self.max_len:
            s = int(torch.randint(n - self.max_len + 1, (1,), generator=g)) if self.train else 0
            seq, xyz = seq[s: s + self.max_len], xyz[s: s + self.max_len]
            n = self.max_len
        cand = (seq != X_ID).nonzero().squeeze(1)
        k_mask = max(1, int(round(self.mask_ratio * n)))
        pick = cand[torch.randperm(cand.numel(), generator=g)[:k_mask]]
        masked = torch.zeros(n, dtype=torch.bool)
        masked[pick] = True
        xyz = xyz - xyz.mean(0)
        if self.train:  # a random rotation: nothing in the model depends on the frame
            q, _ = torch.linalg.qr(torch.randn(3, 3, generator=g))
            xyz = xyz @ q
        return seq, xyz, masked


def collate(batch):
    n = max(b[0].shape[0] for b in batch)
    B = len(batch)
    seq = torch.full((B, n), PAD_ID, dtype=torch.long)
    xyz = torch.zeros((B, n, 3))
    masked = torch.zeros((B, n), dtype=torch.bool)
    valid = torch.zeros((B, n), dtype=torch.bool)
    for j, (s, x, m) in enumerate(batch):
        L = s.shape[0]
        seq[j, :L], xyz[j, :L], masked[j, :L], valid[j, :L] = s, x, m, True
    return seq, xyz, masked, valid


# ---- model --------------------------------------------------------------------------------

class DistanceRBF(nn.Module):
    """Radial basis expansion of pairwise C-alpha distances (0 to 22 A)."""

    def __init__(self, n=16, top=22.0):
        super().__init__()
        self.register_buffer("centers", torch.linspace(0, top, n), persistent=False)
        self.gamma = (n / top) ** 2

    def forward(self, xyz, known):
        d = torch.cdist(xyz, xyz)
        r = torch.exp(-self.gamma * (d.unsqueeze(-1) - self.centers) ** 2)
        pair = known.unsqueeze(2) & known.unsqueeze(1)
        return r * pair.unsqueeze(-1)  # pairs with an unknown position: all zeros


class BiasedLayer(nn.Module):
    """Pre-norm Transformer layer whose attention logits get a per-head bias computed from the
    pair's distance features."""

    def __init__(self, d, heads, dropout, n_rbf):
        super().__init__()
        self.h = heads
        self.n1, self.n2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.out = nn.Linear(d, d)
        self.bias = nn.Linear(n_rbf, heads)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x, rbf, keys):
        B, L, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(B, L, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        bias = self.bias(rbf).permute(0, 3, 1, 2).to(q.dtype)
        bias = bias.masked_fill(~keys[:, None, None, :], float("-inf"))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=bias,
                                           dropout_p=self.p if self.training else 0.0)
        x = x + self.drop(self.out(o.transpose(1, 2).reshape(B, L, d)))
        return x + self.drop(self.ff(self.n2(x)))


class ProteinMAE(nn.Module):
    def __init__(self, d, heads, n_enc, n_dec, dropout, max_len, predict_coords):
        super().__init__()
        self.rbf = DistanceRBF()
        n_rbf = self.rbf.centers.numel()
        self.tok = nn.Embedding(N_TOKENS, d)
        self.register_buffer("pos", self._sinusoid(max_len, d), persistent=False)
        # Only with coordinate prediction: the visible residues' coordinates as input, since
        # the distances to the hidden ones are unknown then.
        self.coord_in = nn.Linear(3, d) if predict_coords else None
        self.enc = nn.ModuleList([BiasedLayer(d, heads, dropout, n_rbf) for _ in range(n_enc)])
        self.enc_norm = nn.LayerNorm(d)
        self.dec_in = nn.Linear(d, d)
        self.mask_token = nn.Parameter(torch.zeros(d))
        self.dec = nn.ModuleList([BiasedLayer(d, heads, dropout, n_rbf) for _ in range(n_dec)])
        self.dec_norm = nn.LayerNorm(d)
        self.residue_head = nn.Linear(d, 20)
        self.coord_head = nn.Linear(d, 3) if predict_coords else None

    @staticmethod
    def _sinusoid(n, d):
        pos = torch.arange(n).unsqueeze(1).float()
        div = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe = torch.zeros(n, d)
        pe[:, 0::2] = torch.sin(pos * div)
        pe[:, 1::2] = torch.cos(pos * div)[:, : d // 2]
        return pe

    def forward(self, seq, xyz, masked, valid):
        """Residue logits [B, L, 20] and (with coordinate prediction, else None) coordinates
        [B, L, 3] in 10 A units, at every position."""
        L = seq.shape[1]
        hide_coords = self.coord_head is not None
        visible = valid & ~masked
        known = visible if hide_coords else valid
        rbf = self.rbf(xyz, known)
        pos = self.pos[:L]
        x = self.tok(seq.masked_fill(masked, MASK_ID)) + pos
        if hide_coords:
            x = x + self.coord_in(xyz / 10.0) * visible.unsqueeze(-1)
        for layer in self.enc:
            x = layer(x, rbf, visible)
        x = self.dec_in(self.enc_norm(x))
        x = torch.where(masked.unsqueeze(-1), self.mask_token + pos, x)
        for layer in self.dec:
            x = layer(x, rbf, valid)
        x = self.dec_norm(x)
        return self.residue_head(x), self.coord_head(x) if hide_coords else None


def losses(model, batch, device, coord_weight):
    seq, xyz, masked, valid = (t.to(device, non_blocking=True) for t in batch)
    logits, coords = model(seq, xyz, masked, valid)
    tgt = seq[masked]
    lg = logits[masked].float()
    ce_sum = F.cross_entropy(lg, tgt, reduction="sum")
    correct = (lg.argmax(-1) == tgt).sum()
    n = masked.sum()
    if coords is not None:
        coord_sum = ((coords[masked].float() * 10.0 - xyz[masked]) ** 2).sum()
    else:
        coord_sum = torch.zeros((), device=device)
    loss = (ce_sum + coord_weight * coord_sum) / n.clamp(min=1)
    return loss, ce_sum, correct, n, coord_sum, seq, masked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pdb_path", help="PDB file, folder of PDB files, or folder with a cache")
    ap.add_argument("--cache_dir", help="where the parsed chains go (default: --pdb_path if a "
                    "folder, else its folder)")
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--batch_size", type=int, default=8, help="per process (GPU)")
    ap.add_argument("--learning_rate", type=float, default=3e-4)
    ap.add_argument("--lr_scaling", choices=["none", "linear", "sqrt"], default="none",
                    help="multiply the learning rate by the number of processes, or its root")
    ap.add_argument("--weight_decay", type=float, default=0.01)
    ap.add_argument("--warmup_steps", type=int, default=100)
    ap.add_argument("--hidden_dim", type=int, default=128)
    ap.add_argument("--num_heads", type=int, default=8)
    ap.add_argument("--num_encoder_layers", type=int, default=3)
    ap.add_argument("--num_decoder_layers", type=int, default=3)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--mask_ratio", type=float, default=0.15)
    ap.add_argument("--coord_weight", type=float, default=0.0,
                    help="> 0: hide the masked residues' coordinates too and predict them")
    ap.add_argument("--max_len", type=int, default=128, help="longer chains are cropped")
    ap.add_argument("--min_len", type=int, default=20)
    ap.add_argument("--val_fraction", type=float, default=0.1)
    ap.add_argument("--num_workers", type=int, default=0)
    ap.add_argument("--gradient_clip", type=float, default=1.0)
    ap.add_argument("--fp16", action="store_true", help="mixed precision on GPUs")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--save_dir", default="checkpoints")
    ap.add_argument("--resume", default="auto", help="auto (the default), none, or a file")
    ap.add_argument("--log_interval", type=int, default=20)
    ap.add_argument("--ddp", action="store_true",
                    help="require the launcher's variables (RANK, WORLD_SIZE, ...)")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU even with GPUs")
    ap.add_argument("--smoke", action="store_true", help="synthetic PDB files and a tiny model "
                    "under ./protein_smoke, three short epochs")
    a = ap.parse_args()
    if a.smoke:
        for k, v in dict(epochs=3, hidden_dim=32, num_heads=2, num_encoder_layers=1,
                         num_decoder_layers=1, max_len=64, learning_rate=2e-3, warmup_steps=5,
                         log_interval=5).items():
            if getattr(a, k) == ap.get_default(k):
                setattr(a, k, v)
        if a.save_dir == ap.get_default("save_dir"):
            a.save_dir = "protein_smoke/checkpoints"
        a.pdb_path = a.pdb_path or "protein_smoke/pdb"
        a.cache_dir = a.cache_dir or "protein_smoke/cache"
    if not a.pdb_path:
        ap.error("--pdb_path is required (or --smoke)")
    if not 0 < a.mask_ratio < 1 or a.hidden_dim % a.num_heads or a.hidden_dim % 2:
        ap.error("need 0 < --mask_ratio < 1 and --hidden_dim even and divisible by --num_heads")
    if a.cache_dir is None:
        a.cache_dir = a.pdb_path if os.path.isdir(a.pdb_path) else \
            os.path.dirname(os.path.abspath(a.pdb_path))

    c = dc.setup(require_launcher=a.ddp, cpu=a.cpu)
    log = dc.Log(c, a.save_dir)
    log("protein MAE: %s" % dc.describe(c))
    if c.device.type == "cpu" and not a.cpu:
        log.warn("no GPU visible: training on the CPU")
    use_amp = a.fp16 and c.device.type == "cuda"
    if a.fp16 and not use_amp:
        log.warn("--fp16 needs a GPU; training in float32")

    # The first process of each node parses (or generates, for --smoke) and writes the cache;
    # the others read it. Every node needs the PDB files; a shared folder works too (writes
    # are atomic renames of the same content).
    if c.local_main:
        done = os.path.join(a.pdb_path, "complete")
        if a.smoke and not os.path.isfile(done):
            import make_synthetic_pdb
            make_synthetic_pdb.write_files(a.pdb_path, 160, 30, 90, 0)
            open(done, "w").close()
        build_cache(a.pdb_path, a.cache_dir, a.min_len, log)
    dc.barrier(c)
    cache = dc.load_checkpoint(c, os.path.join(a.cache_dir, "proteins.pt"), "the chain cache")
    n = len(cache["names"])
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    n_val = max(1, int(round(n * a.val_fraction)))
    if n - n_val < c.world:
        raise SystemExit("error: %d training chains for %d processes" % (n - n_val, c.world))
    train_set = Chains(cache, perm[n_val:], a.max_len, a.mask_ratio, a.seed, True)
    val_set = Chains(cache, perm[:n_val], a.max_len, a.mask_ratio, a.seed, False)
    counts = torch.bincount(torch.cat([cache["seqs"][i].long() for i in perm[n_val:]]),
                            minlength=N_TOKENS)[:20]
    common = int(counts.argmax())

    train_sampler = DistributedSampler(train_set, c.world, c.rank, shuffle=True, seed=a.seed,
                                       drop_last=True) if c.distributed else None
    val_sampler = DistributedSampler(val_set, c.world, c.rank, shuffle=False) \
        if c.distributed else None
    lk = {"batch_size": a.batch_size, "num_workers": a.num_workers, "collate_fn": collate,
          "pin_memory": c.device.type == "cuda"}
    if a.num_workers > 0:
        lk["persistent_workers"] = True
    train_loader = DataLoader(train_set, sampler=train_sampler, shuffle=train_sampler is None,
                              drop_last=True, **lk)
    val_loader = DataLoader(val_set, sampler=val_sampler, shuffle=False, **lk)
    if len(train_loader) == 0:
        raise SystemExit("error: --batch_size %d: fewer training chains per process (%d)" % (
            a.batch_size, len(train_set) // c.world))

    torch.manual_seed(a.seed)
    model = ProteinMAE(a.hidden_dim, a.num_heads, a.num_encoder_layers, a.num_decoder_layers,
                       a.dropout, a.max_len, a.coord_weight > 0).to(c.device)
    lr = a.learning_rate * {"none": 1, "linear": c.world, "sqrt": math.sqrt(c.world)}[
        a.lr_scaling]
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=a.weight_decay)
    total = len(train_loader) * a.epochs
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(a.warmup_steps, total))
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    start_epoch, step, best = 1, 0, float("inf")
    last_line = None
    path = dc.choose_resume(c, a.resume, a.save_dir, log)
    if path:
        ck = dc.load_checkpoint(c, path)
        model.load_state_dict(dc.strip_module(ck["model"]))
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        start_epoch, step, best = ck["epoch"] + 1, ck["step"], ck["best"]
        last_line = ck.get("last_line")
        log("resumed from %s at epoch %d step %d" % (path, ck["epoch"], step))
    ddp = DDP(model, device_ids=[c.device.index] if c.device.type == "cuda" else None) \
        if c.distributed else model
    log("%d training and %d validation chains (of at most %d residues); %d processes x batch "
        "%d = %d chains per step; %d steps per epoch; learning rate %.3g" % (
            len(train_set), len(val_set), a.max_len, c.world, a.batch_size,
            c.world * a.batch_size, len(train_loader), lr))
    log("model: %d parameters; most common residue %s (%.1f%% of training residues)" % (
        sum(p.numel() for p in model.parameters()), AA[common],
        100.0 * float(counts[common]) / float(counts.sum())))
    tb = dc.tensorboard(c, a.save_dir, log)

    # The metrics of the last finished epoch (kept in the checkpoints, so a job resumed after
    # its last epoch still ends with them).
    last_line = last_line or "step=%d (nothing trained)" % step
    t_run = time.time()
    for epoch in range(start_epoch, a.epochs + 1):
        model.train()
        train_set.epoch = epoch
        if train_sampler is not None:
            train_sampler.set_epoch(epoch)
        torch.manual_seed(dc.epoch_seed(a.seed, epoch, c.rank))
        t0 = time.time()
        s = [0.0, 0.0, 0.0]  # CE sum, correct, masked residues
        for batch in train_loader:
            with torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
                loss, ce, corr, nm, _, _, _ = losses(ddp, batch, c.device, a.coord_weight)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            if a.gradient_clip > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.gradient_clip)
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            s[0] += float(ce.detach())
            s[1] += float(corr)
            s[2] += float(nm)
            if step % a.log_interval == 0:
                log("epoch %d step %d loss %.4f acc %.3f lr %.3g" % (
                    epoch, step, loss.item(), float(corr) / max(1, float(nm)),
                    sched.get_last_lr()[0]))
                if tb:
                    tb.add_scalar("train/loss", loss.item(), step)
                    tb.add_scalar("train/lr", sched.get_last_lr()[0], step)
        t_train = time.time() - t0
        tr = dc.all_sum(c, s)

        model.eval()
        v = [0.0, 0.0, 0.0, 0.0, 0.0]  # CE sum, correct, masked, coord SE sum, common-correct
        seen = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            for batch in val_loader:
                b = batch[0].shape[0]
                real = dc.real_positions(len(val_set), c, seen, b).bool()
                seen += b
                batch = tuple(t[real] for t in batch)
                if batch[0].shape[0] == 0:
                    continue
                _, ce, corr, nm, cse, seq, masked = losses(model, batch, c.device,
                                                           a.coord_weight)
                v[0] += float(ce)
                v[1] += float(corr)
                v[2] += float(nm)
                v[3] += float(cse)
                v[4] += float((seq[masked] == common).sum())
        vt = dc.all_sum(c, v)
        nm = max(1.0, vt[2])
        val_loss, val_acc = vt[0] / nm, vt[1] / nm
        coord = " val_coord_rmsd=%.2f" % math.sqrt(vt[3] / nm) if a.coord_weight > 0 else ""
        last_line = ("step=%d train_loss=%.4f train_acc=%.4f val_loss=%.4f val_acc=%.4f%s "
                     "baseline_acc=%.4f" % (step, tr[0] / max(1, tr[2]), tr[1] / max(1, tr[2]),
                                            val_loss, val_acc, coord, vt[4] / nm))
        log("epoch %d/%d %s lr=%.3g time=%.1fs chains_per_s=%.0f" % (
            epoch, a.epochs, last_line, sched.get_last_lr()[0], time.time() - t0,
            len(train_loader) * a.batch_size * c.world / max(t_train, 1e-9)))
        if tb:
            tb.add_scalar("val/loss", val_loss, epoch)
            tb.add_scalar("val/acc", val_acc, epoch)
            tb.flush()
        if c.main:
            is_best = val_loss < best
            if is_best:
                best = val_loss
                dc.save_atomic({"model": model.state_dict(), "epoch": epoch, "step": step,
                                "val_loss": val_loss, "val_acc": val_acc, "args": vars(a)},
                               os.path.join(a.save_dir, "best_model.pt"))
            p = os.path.join(a.save_dir, dc.ckpt_name(epoch, step))
            dc.save_atomic({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict(), "scaler": scaler.state_dict(),
                            "epoch": epoch, "step": step, "best": best, "world": c.world,
                            "args": vars(a), "last_line": last_line}, p)
            log("saved %s%s" % (p, " (best so far: best_model.pt)" if is_best else ""))
        best = dc.broadcast_obj(c, best)
    if tb:
        tb.close()
    log("done: epochs=%d %s wall=%.1fs" % (a.epochs, last_line, time.time() - t_run))
    dc.finish(c)


if __name__ == "__main__":
    main()
