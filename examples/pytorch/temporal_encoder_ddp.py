#!/usr/bin/env python3
"""temporal_encoder_ddp.py - pretrains a patch-based Transformer encoder of time series with
DistributedDataParallel, in two stages:

  1. reconstruct: a share of the curve's patches is masked and the encoder with a linear head
     reconstructs them (mean squared error on the masked patches; no language model);
  2. align: a projector turns the encoder's output into K soft tokens, prepended to a prompt,
     and a frozen decoder language model with the Qwen2 architecture is trained to continue
     them with the curve's one-sentence description. Only the encoder and the projector learn.

    torchrun --nproc_per_node=4 temporal_encoder_ddp.py --config configs/temporal_encoder.yaml
    ctrun --nproc_per_node=4 temporal_encoder_ddp.py --config ... --output_dir checkpoints/run1
    python temporal_encoder_ddp.py --smoke          # tiny model and data, three short epochs

Configuration: YAML (see configs/temporal_encoder.yaml for every key and its default);
`--set section.key=value` overrides one key. data.batch_size is per process. The language
model is Qwen2ForCausalLM loaded from lm.path (a local folder with its tokenizer), or, when
lm.path is null, a small randomly initialised Qwen2Config with a word-level tokenizer built from
the descriptions. The data are synthetic curves (temporal_curves.py), generated on the fly or
read from a cache written by pregenerate_temporal_data.py (data.cache_dir).

Checkpoints (rank 0): CHECKPOINT_DIR/epoch_{e}_step_{s}.pt after every epoch (model, optimizer,
LR scheduler, gradient scaler, epoch, step) and best_model.pt (lowest validation loss of the
current stage). --resume auto (the default) continues from the newest epoch checkpoint, which
is what makes a job restarted by ctrun or torchrun go on where it stopped. Logs: LOG_DIR/train.log
and LOG_DIR/tensorboard.

It does not download anything: a real Qwen2 model must already be in a local folder.
"""
import argparse
import contextlib
import copy
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import yaml
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ddp_common as dc  # noqa: E402
import temporal_curves  # noqa: E402

DEFAULTS = {
    "data": {
        "cache_dir": None,      # pregenerated curves; null: generated on the fly from the seed
        "num_samples": 4096,    # without a cache: how many curves (validation included)
        "seq_len": 256,         # without a cache: points per curve
        "val_fraction": 0.1,    # the last samples are the validation set
        "seed": 0,
        "batch_size": 16,       # per process (GPU)
        "num_workers": 0,
        "pin_memory": True,
        "prefetch_factor": 2,
    },
    "model": {
        "patch_len": 16,
        "d_model": 128,
        "num_layers": 3,
        "num_heads": 4,
        "ff_dim": 256,
        "dropout": 0.1,
        "num_soft_tokens": 8,
        "mask_ratio": 0.4,
        "gradient_checkpointing": False,  # recompute the encoder layers in the backward pass
    },
    "lm": {
        "path": None,           # local Qwen2 folder (config, weights, tokenizer); null: tiny random
        "dtype": "float32",     # float32, bfloat16 or float16 (the frozen LM's weights)
        "hidden_size": 128,     # the tiny random LM's size when path is null
        "num_layers": 2,
        "num_heads": 4,
        "num_kv_heads": 2,
        "intermediate_size": 256,
        "seed": 1234,
        "pretrain_steps": 300,  # the tiny random LM first learns the descriptions' language
        "prompt": "Describe the curve:",
        "max_text_tokens": 48,
        "gradient_checkpointing": False,  # recompute the LM's layers in the backward pass
    },
    "training": {
        "num_epochs": 10,
        "reconstruct_epochs": 3,  # stage 1 epochs; the rest are stage 2 (align)
        "learning_rate": 3e-4,
        "weight_decay": 0.01,
        "warmup_steps": 100,
        "gradient_accumulation_steps": 1,
        "fp16": False,
        "gradient_clip": 1.0,
        "seed": 42,
        "log_interval": 50,
    },
    "output": {
        "checkpoint_dir": "checkpoints/temporal_pretrain",
        "log_dir": "logs/temporal_pretrain",
    },
}

SMOKE = {
    "data": {"num_samples": 480, "seq_len": 64, "batch_size": 16},
    "model": {"patch_len": 8, "d_model": 32, "num_layers": 2, "num_heads": 2, "ff_dim": 64,
              "num_soft_tokens": 4},
    "lm": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
           "intermediate_size": 64, "max_text_tokens": 40, "pretrain_steps": 200},
    "training": {"num_epochs": 3, "reconstruct_epochs": 1, "learning_rate": 2e-3,
                 "warmup_steps": 5, "log_interval": 5},
    "output": {"checkpoint_dir": "temporal_smoke/checkpoints", "log_dir": "temporal_smoke/logs"},
}


def merge(base, over, where=""):
    out = copy.deepcopy(base)
    for k, v in (over or {}).items():
        if k not in out:
            raise SystemExit("error: config: unknown key %s%s (known: %s)" % (
                where, k, ", ".join(sorted(out))))
        if isinstance(out[k], dict):
            if not isinstance(v, dict):
                raise SystemExit("error: config: %s%s must be a mapping" % (where, k))
            out[k] = merge(out[k], v, where + k + ".")
        else:
            out[k] = v
    return out


def load_config(a):
    cfg = merge(DEFAULTS, SMOKE) if a.smoke else copy.deepcopy(DEFAULTS)
    if a.config:
        try:
            with open(a.config, encoding="utf-8") as f:
                user = yaml.safe_load(f) or {}
        except (OSError, yaml.YAMLError) as e:
            raise SystemExit("error: --config %s: %s" % (a.config, e))
        cfg = merge(cfg, user)
    for item in a.set:
        key, eq, val = item.partition("=")
        path = key.split(".")
        if not eq or len(path) != 2:
            raise SystemExit("error: --set %s: expected section.key=value" % item)
        cfg = merge(cfg, {path[0]: {path[1]: yaml.safe_load(val)}})
    if a.output_dir:
        cfg["output"]["checkpoint_dir"] = a.output_dir
    # YAML reads 1e-4 as a string; accept numbers written either way.
    for sec, key in (("training", "learning_rate"), ("training", "weight_decay"),
                     ("training", "gradient_clip"), ("data", "val_fraction"),
                     ("model", "mask_ratio"), ("model", "dropout")):
        try:
            cfg[sec][key] = float(cfg[sec][key])
        except (TypeError, ValueError):
            raise SystemExit("error: config: %s.%s = %r is not a number" % (
                sec, key, cfg[sec][key]))
    return cfg


# ---- data ---------------------------------------------------------------------------------

class Curves(Dataset):
    """Samples [lo, hi) of the cache, or of the on-the-fly generator."""

    def __init__(self, cfg, lo, hi, cache):
        self.lo, self.hi, self.cache = lo, hi, cache
        self.seed, self.length = cfg["data"]["seed"], cfg["data"]["seq_len"]

    def __len__(self):
        return self.hi - self.lo

    def __getitem__(self, k):
        i = self.lo + k
        if self.cache is not None:
            curve, text = np.array(self.cache[0][i]), self.cache[1][i]
        else:
            curve, text = temporal_curves.make(self.seed, i, self.length)
        return torch.from_numpy(curve), text


class WordTokenizer:
    """A word-level tokenizer (the tokenizers library) over the words of the descriptions and
    the prompt, for the small random LM: ids 0 <pad>, 1 <unk>, 2 <eos>, then the words sorted."""

    def __init__(self, texts):
        from tokenizers import Tokenizer, pre_tokenizers
        from tokenizers.models import WordLevel
        pre = pre_tokenizers.Whitespace()
        words = set()
        for t in texts:
            words.update(w for w, _ in pre.pre_tokenize_str(t))
        vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2}
        for w in sorted(words):
            vocab[w] = len(vocab)
        self.tok = Tokenizer(WordLevel(vocab, unk_token="<unk>"))
        self.tok.pre_tokenizer = pre
        self.pad_id, self.eos_id, self.vocab_size = 0, 2, len(vocab)

    def encode(self, texts):
        return [e.ids for e in self.tok.encode_batch(list(texts))]


class HFTokenizer:
    def __init__(self, path):
        from transformers import AutoTokenizer
        self.tok = AutoTokenizer.from_pretrained(path)
        self.eos_id = self.tok.eos_token_id
        self.pad_id = self.tok.pad_token_id if self.tok.pad_token_id is not None else self.eos_id
        self.vocab_size = len(self.tok)

    def encode(self, texts):
        return self.tok(list(texts), add_special_tokens=False)["input_ids"]


class Collate:
    def __init__(self, tok, max_tokens):
        self.tok, self.max_tokens = tok, max_tokens

    def __call__(self, batch):
        curves = torch.stack([b[0] for b in batch])
        ids = [x[: self.max_tokens - 1] + [self.tok.eos_id] for x in self.tok.encode(
            [b[1] for b in batch])]
        n = max(len(x) for x in ids)
        text = torch.full((len(ids), n), self.tok.pad_id, dtype=torch.long)
        mask = torch.zeros((len(ids), n), dtype=torch.bool)
        for j, x in enumerate(ids):
            text[j, : len(x)] = torch.tensor(x)
            mask[j, : len(x)] = True
        return curves, text, mask


# ---- model --------------------------------------------------------------------------------

class Projector(nn.Module):
    """K learned queries attend over the encoder's patch states; an MLP maps each to the LM's
    hidden size: K soft tokens."""

    def __init__(self, d, k, lm_hidden, heads):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(k, d) * 0.02)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.mlp = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, lm_hidden), nn.GELU(),
                                 nn.Linear(lm_hidden, lm_hidden))

    def forward(self, h):
        q = self.queries.unsqueeze(0).expand(h.shape[0], -1, -1)
        o, _ = self.attn(q, h, h, need_weights=False)
        return self.mlp(o + q)


class TemporalModel(nn.Module):
    """Per-curve normalisation, non-overlapping patches, a Transformer encoder; a linear
    reconstruction head (stage 1) and the projector to soft tokens (stage 2)."""

    def __init__(self, m, seq_len, lm_hidden):
        super().__init__()
        self.p = m["patch_len"]
        if seq_len % self.p:
            raise SystemExit("error: config: data.seq_len %d is not a multiple of "
                             "model.patch_len %d" % (seq_len, self.p))
        d, n = m["d_model"], seq_len // self.p
        self.gc = bool(m["gradient_checkpointing"])
        self.embed = nn.Linear(self.p, d)
        self.mask_token = nn.Parameter(torch.zeros(d))
        self.pos = nn.Parameter(torch.randn(n, d) * 0.02)
        self.layers = nn.ModuleList([
            nn.TransformerEncoderLayer(d, m["num_heads"], m["ff_dim"], m["dropout"],
                                       batch_first=True, norm_first=True)
            for _ in range(m["num_layers"])])
        self.norm = nn.LayerNorm(d)
        self.recon = nn.Linear(d, self.p)
        self.projector = Projector(d, m["num_soft_tokens"], lm_hidden, m["num_heads"])

    def patches(self, curves):
        mu = curves.mean(-1, keepdim=True)
        sd = curves.std(-1, keepdim=True) + 1e-5
        return ((curves - mu) / sd).unfold(-1, self.p, self.p)

    def encode(self, patches, mask=None):
        x = self.embed(patches)
        if mask is not None:
            x = torch.where(mask.unsqueeze(-1), self.mask_token.to(x.dtype), x)
        x = x + self.pos
        for layer in self.layers:
            if self.gc and self.training:
                x = checkpoint(layer, x, use_reentrant=False)
            else:
                x = layer(x)
        return self.norm(x)

    def forward(self, curves, mask=None):
        """With mask (stage 1): (reconstructed patches, target patches). Without: soft tokens."""
        patches = self.patches(curves)
        if mask is not None:
            return self.recon(self.encode(patches, mask)), patches
        return self.projector(self.encode(patches))


def build_lm(cfg, tok, device, texts=None, log=print):
    from transformers import Qwen2Config, Qwen2ForCausalLM
    L = cfg["lm"]
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
             "float16": torch.float16}.get(L["dtype"])
    if dtype is None:
        raise SystemExit("error: config: lm.dtype %r (expected float32, bfloat16 or float16)"
                         % L["dtype"])
    if L["path"]:
        lm = Qwen2ForCausalLM.from_pretrained(L["path"], dtype=dtype)
    else:
        conf = Qwen2Config(vocab_size=tok.vocab_size, hidden_size=L["hidden_size"],
                           intermediate_size=L["intermediate_size"],
                           num_hidden_layers=L["num_layers"],
                           num_attention_heads=L["num_heads"],
                           num_key_value_heads=L["num_kv_heads"], max_position_embeddings=512,
                           bos_token_id=tok.eos_id, eos_token_id=tok.eos_id,
                           pad_token_id=tok.pad_id, tie_word_embeddings=True)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(L["seed"])
            lm = Qwen2ForCausalLM(conf).to(device)
            if texts is not None and L["pretrain_steps"] > 0:
                pretrain_lm(lm, tok, texts, L["prompt"], cfg["model"]["num_soft_tokens"],
                            L["pretrain_steps"], L["seed"], device, log)
            lm = lm.to(dtype)
    for p in lm.parameters():
        p.requires_grad_(False)
    if L["gradient_checkpointing"]:
        # The LM's checkpointing acts in training mode only; Qwen2 has no dropout by default,
        # so training mode changes nothing else.
        kw = {"use_reentrant": False}
        if hasattr(lm, "activation_checkpointing_enable"):  # transformers >= 5
            lm.activation_checkpointing_enable(activation_checkpointing_kwargs=kw)
        else:
            lm.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw)
        lm.train()
    else:
        lm.eval()
    return lm.to(device)


def pretrain_lm(lm, tok, texts, prompt, k, steps, seed, device, log):
    """Stands in for a real pretrained Qwen2: teaches the tiny random LM the descriptions'
    language and to read a prefix of k input embeddings, as a real LM reads a soft prompt.
    Its prefix holds the embeddings of k words drawn from the description itself, in random
    order, so it learns to take content from the prefix; in stage 2 the projector has to put
    the content there. It learns nothing about the curves."""
    g = torch.Generator().manual_seed(seed)
    head = tok.encode([prompt])[0]
    ids = [x + [tok.eos_id] for x in tok.encode(texts)]
    opt = torch.optim.AdamW(lm.parameters(), lr=3e-3)
    emb = lm.get_input_embeddings()
    lm.train()
    for s in range(steps):
        pick = torch.randint(len(ids), (32,), generator=g).tolist()
        n = k + len(head) + max(len(ids[j]) for j in pick)
        x = torch.full((32, n), tok.pad_id, dtype=torch.long)
        m = torch.zeros((32, n), dtype=torch.long)
        lab = torch.full((32, n), -100, dtype=torch.long)
        for r, j in enumerate(pick):
            t = torch.tensor(ids[j][:-1])
            pre = t[torch.randperm(t.numel(), generator=g)[:k]]
            pre = pre[torch.randint(pre.numel(), (k,), generator=g)] if pre.numel() < k else pre
            row = torch.cat([pre, torch.tensor(head), torch.tensor(ids[j])])
            x[r, : row.numel()] = row
            m[r, : row.numel()] = 1
            lab[r, k + len(head): row.numel()] = torch.tensor(ids[j])
        x, m, lab = x.to(device), m.to(device), lab.to(device)
        loss = lm(inputs_embeds=emb(x), attention_mask=m, labels=lab).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if s + 1 == steps:
            log("the random LM learnt the descriptions' language in %d steps (loss %.3f)" % (
                steps, loss.item()))


def lm_loss(lm, soft, prompt_ids, text, tmask):
    """Cross-entropy of the description given [soft tokens, prompt]: (mean, sum, correct
    tokens, tokens)."""
    emb = lm.get_input_embeddings()
    b, k = soft.shape[0], soft.shape[1]
    pe = emb(prompt_ids).unsqueeze(0).expand(b, -1, -1)
    te = emb(text)
    x = torch.cat([soft.to(te.dtype), pe, te], 1)
    head = k + prompt_ids.shape[0]
    attn = torch.cat([torch.ones(b, head, dtype=torch.long, device=text.device),
                      tmask.long()], 1)
    labels = torch.cat([torch.full((b, head), -100, dtype=torch.long, device=text.device),
                        torch.where(tmask, text, torch.full_like(text, -100))], 1)
    logits = lm(inputs_embeds=x, attention_mask=attn, use_cache=False).logits[:, :-1].float()
    tgt = labels[:, 1:]
    total = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                            ignore_index=-100, reduction="sum")
    valid = tgt != -100
    count = valid.sum()
    correct = ((logits.argmax(-1) == tgt) & valid).sum()
    return total / count.clamp(min=1), total, correct, count


def patch_mask(n, p_count, ratio, gen):
    """[n, p_count] bool, round(ratio*p_count) (at least 1) masked patches per row."""
    k = max(1, int(round(ratio * p_count)))
    order = torch.rand(n, p_count, generator=gen).argsort(-1)
    return order < k


# ---- training -----------------------------------------------------------------------------

def stage_of(cfg, epoch):
    return "reconstruct" if epoch <= cfg["training"]["reconstruct_epochs"] else "align"


def set_stage(model, stage):
    for p in model.parameters():
        p.requires_grad_(True)
    if stage == "reconstruct":
        frozen = list(model.projector.parameters())
    else:  # no masking in stage 2
        frozen = list(model.recon.parameters()) + [model.mask_token]
    for p in frozen:
        p.requires_grad_(False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", help="YAML file (keys as configs/temporal_encoder.yaml)")
    ap.add_argument("--output_dir", help="checkpoint folder (overrides output.checkpoint_dir)")
    ap.add_argument("--resume", default="auto",
                    help="auto (newest epoch checkpoint, the default), none, or a file")
    ap.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                    help="override one config key (repeatable)")
    ap.add_argument("--smoke", action="store_true",
                    help="tiny model and data, three short epochs, files under ./temporal_smoke")
    ap.add_argument("--cpu", action="store_true", help="train on the CPU even with GPUs")
    a = ap.parse_args()
    cfg = load_config(a)
    D, M, T, O = cfg["data"], cfg["model"], cfg["training"], cfg["output"]

    c = dc.setup(cpu=a.cpu)
    log = dc.Log(c, O["log_dir"])
    log("temporal encoder: %s" % dc.describe(c))
    if c.device.type == "cpu" and not a.cpu:
        log.warn("no GPU visible: training on the CPU")
    use_amp = bool(T["fp16"]) and c.device.type == "cuda"
    if T["fp16"] and not use_amp:
        log.warn("training.fp16 needs a GPU; training in float32")

    # Data: the last val_fraction of the samples are the validation set.
    cache = None
    if D["cache_dir"]:
        try:
            curves, texts, meta = temporal_curves.read_cache(D["cache_dir"])
        except (OSError, ValueError) as e:
            raise SystemExit("error: data.cache_dir: %s" % e)
        cache = (curves, texts)
        D["num_samples"], D["seq_len"] = meta["num_samples"], meta["length"]
        all_texts = texts
    else:
        all_texts = [temporal_curves.describe(temporal_curves.sample_params(D["seed"], i))
                     for i in range(D["num_samples"])]
    n_val = max(1, int(D["num_samples"] * D["val_fraction"]))
    n_train = D["num_samples"] - n_val
    if n_train < c.world:
        raise SystemExit("error: %d training samples for %d processes" % (n_train, c.world))
    train_set = Curves(cfg, 0, n_train, cache)
    val_set = Curves(cfg, n_train, D["num_samples"], cache)

    tok = HFTokenizer(cfg["lm"]["path"]) if cfg["lm"]["path"] else \
        WordTokenizer(all_texts[:n_train] + [cfg["lm"]["prompt"]])
    path = dc.choose_resume(c, a.resume, O["checkpoint_dir"], log)
    torch.manual_seed(T["seed"])
    # The tiny random LM is pretrained by rank 0 and sent to the others (a resumed job takes
    # it from the checkpoint instead).
    pre = not cfg["lm"]["path"] and path is None and c.main
    lm = build_lm(cfg, tok, c.device, all_texts[:n_train] if pre else None, log)
    if c.distributed and not cfg["lm"]["path"] and path is None:
        for t in list(lm.parameters()) + list(lm.buffers()):
            dc.dist.broadcast(t.data, 0)
    prompt_ids = torch.tensor(tok.encode([cfg["lm"]["prompt"]])[0], dtype=torch.long,
                              device=c.device)
    model = TemporalModel(M, D["seq_len"], lm.config.hidden_size).to(c.device)

    train_sampler = DistributedSampler(train_set, c.world, c.rank, shuffle=True,
                                       seed=T["seed"], drop_last=True) if c.distributed else None
    val_sampler = DistributedSampler(val_set, c.world, c.rank, shuffle=False) \
        if c.distributed else None
    lk = {"batch_size": D["batch_size"], "num_workers": D["num_workers"],
          "pin_memory": bool(D["pin_memory"]) and c.device.type == "cuda",
          "collate_fn": Collate(tok, cfg["lm"]["max_text_tokens"])}
    if D["num_workers"] > 0:
        lk.update(prefetch_factor=D["prefetch_factor"], persistent_workers=True)
    train_loader = DataLoader(train_set, sampler=train_sampler,
                              shuffle=train_sampler is None, drop_last=True, **lk)
    val_loader = DataLoader(val_set, sampler=val_sampler, shuffle=False, **lk)

    accum = max(1, int(T["gradient_accumulation_steps"]))
    steps_per_epoch = max(1, math.ceil(len(train_loader) / accum))
    total = steps_per_epoch * T["num_epochs"]
    opt = torch.optim.AdamW(model.parameters(), lr=T["learning_rate"],
                            weight_decay=T["weight_decay"])
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(T["warmup_steps"], total))
    scaler = torch.amp.GradScaler("cuda", enabled=use_amp)

    start_epoch, step, best = 1, 0, {}
    last_line = None
    if path:
        ck = dc.load_checkpoint(c, path)
        model.load_state_dict(dc.strip_module(ck["model"]))
        opt.load_state_dict(ck["optimizer"])
        sched.load_state_dict(ck["scheduler"])
        scaler.load_state_dict(ck["scaler"])
        if "lm" in ck and not cfg["lm"]["path"]:
            lm.load_state_dict(ck["lm"])
        start_epoch, step, best = ck["epoch"] + 1, ck["step"], dict(ck["best"])
        last_line = ck.get("last_line")
        if ck.get("world") != c.world:
            log.warn("checkpoint was written by %s processes, now %d: the data order differs"
                     % (ck.get("world"), c.world))
        log("resumed from %s at epoch %d step %d" % (path, ck["epoch"], step))
    log("%d training and %d validation curves of %d points; %d processes x batch %d x "
        "accumulation %d = %d curves per step; %d steps per epoch" % (
            n_train, n_val, D["seq_len"], c.world, D["batch_size"], accum,
            c.world * D["batch_size"] * accum, steps_per_epoch))
    log("model: %d trainable parameters; LM %s (%d parameters, frozen)" % (
        sum(p.numel() for p in model.parameters()),
        cfg["lm"]["path"] or "random Qwen2 (lm.path is null)",
        sum(p.numel() for p in lm.parameters())))
    tb = dc.tensorboard(c, O["log_dir"], log)
    n_patches = D["seq_len"] // M["patch_len"]

    ddp, ddp_stage = None, None
    # The metrics of the last finished epoch (kept in the checkpoints, so a job resumed after
    # its last epoch still ends with them).
    last_line = last_line or "step=%d (nothing trained)" % step
    t_run = time.time()
    for epoch in range(start_epoch, T["num_epochs"] + 1):
        stage = stage_of(cfg, epoch)
        if stage != ddp_stage:
            # The trainable parameters change with the stage; DDP registers the ones that
            # require gradients when it is built, so it is built again.
            set_stage(model, stage)
            ddp = None  # the old wrapper's gradient hooks go with it
            ddp = DDP(model, device_ids=[c.device.index] if c.device.type == "cuda" else None) \
                if c.distributed else model
            ddp_stage = stage
        model.train()
        if train_sampler is not None:
            train_sampler.set_epoch(epoch)
        torch.manual_seed(dc.epoch_seed(T["seed"], epoch, c.rank))
        gen = torch.Generator().manual_seed(dc.epoch_seed(T["seed"] + 1, epoch, c.rank))
        t0 = time.time()
        sums = [0.0, 0.0]
        nb = len(train_loader)
        for i, (curves, text, tmask) in enumerate(train_loader):
            curves = curves.to(c.device, non_blocking=True)
            last = (i + 1) % accum == 0 or i + 1 == nb
            sync = contextlib.nullcontext() if last or not c.distributed else ddp.no_sync()
            with sync, torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
                if stage == "reconstruct":
                    mask = patch_mask(curves.shape[0], n_patches, M["mask_ratio"], gen)
                    mask = mask.to(c.device)
                    pred, target = ddp(curves, mask)
                    loss = F.mse_loss(pred.float()[mask], target[mask])
                else:
                    soft = ddp(curves)
                    loss = lm_loss(lm, soft, prompt_ids, text.to(c.device),
                                   tmask.to(c.device))[0]
                scaler.scale(loss / accum).backward()
            sums[0] += loss.item()
            sums[1] += 1
            if not last:
                continue
            scaler.unscale_(opt)
            if T["gradient_clip"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), T["gradient_clip"])
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            if step % T["log_interval"] == 0:
                log("epoch %d step %d %s loss %.4f lr %.3g" % (
                    epoch, step, stage, loss.item(), sched.get_last_lr()[0]))
                if tb:
                    tb.add_scalar("train/loss_" + stage, loss.item(), step)
                    tb.add_scalar("train/lr", sched.get_last_lr()[0], step)
        train_loss = dc.all_sum(c, sums)
        train_loss = train_loss[0] / max(1, train_loss[1])
        t_train = time.time() - t0

        # Validation: every rank a shard; the padding DistributedSampler adds is not counted.
        model.eval()
        vgen = torch.Generator().manual_seed(T["seed"] + 7)
        v = [0.0, 0.0, 0.0, 0.0]  # recon sum, curves, correct tokens, tokens
        lm_sum = 0.0
        seen = 0
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=use_amp):
            for curves, text, tmask in val_loader:
                b = curves.shape[0]
                real = dc.real_positions(len(val_set), c, seen, b).to(c.device)
                seen += b
                curves = curves.to(c.device)
                mask = patch_mask(b, n_patches, M["mask_ratio"], vgen).to(c.device)
                pred, target = model(curves, mask)
                per = ((pred.float() - target) ** 2 * mask.unsqueeze(-1)).sum((1, 2)) / (
                    mask.sum(1) * M["patch_len"])
                v[0] += float((per.double() * real).sum())
                v[1] += float(real.sum())
                if stage == "align":
                    text, tmask = text.to(c.device), tmask.to(c.device)
                    tmask = tmask & real.bool().unsqueeze(1)
                    _, lsum, corr, cnt = lm_loss(lm, model(curves), prompt_ids, text, tmask)
                    lm_sum += float(lsum)
                    v[2] += float(corr)
                    v[3] += float(cnt)
        tot = dc.all_sum(c, v + [lm_sum])
        val_recon = tot[0] / max(1, tot[1])
        if stage == "align":
            val_loss = tot[4] / max(1, tot[3])
            extra = " val_lm_loss=%.4f val_token_acc=%.4f" % (val_loss, tot[2] / max(1, tot[3]))
        else:
            val_loss = val_recon
            extra = " val_recon=%.4f" % val_recon
        dt = time.time() - t0
        last_line = "stage=%s step=%d train_loss=%.4f val_loss=%.4f%s" % (
            stage, step, train_loss, val_loss, extra)
        log("epoch %d/%d %s lr=%.3g time=%.1fs samples_per_s=%.0f" % (
            epoch, T["num_epochs"], last_line, sched.get_last_lr()[0], dt,
            nb * D["batch_size"] * c.world / max(t_train, 1e-9)))
        if tb:
            tb.add_scalar("val/loss_" + stage, val_loss, epoch)
            tb.add_scalar("val/recon", val_recon, epoch)
            if stage == "align":
                tb.add_scalar("val/token_acc", tot[2] / max(1, tot[3]), epoch)
            tb.flush()

        if c.main:
            is_best = stage not in best or val_loss < best[stage]
            if is_best:
                best[stage] = val_loss
                dc.save_atomic({"model": model.state_dict(), "epoch": epoch, "step": step,
                                "stage": stage, "val_loss": val_loss, "config": cfg},
                               os.path.join(O["checkpoint_dir"], "best_model.pt"))
            ck = {"model": model.state_dict(), "optimizer": opt.state_dict(),
                  "scheduler": sched.state_dict(), "scaler": scaler.state_dict(),
                  "epoch": epoch, "step": step, "stage": stage, "best": best,
                  "world": c.world, "config": cfg,
                  "last_line": last_line}
            if not cfg["lm"]["path"]:
                ck["lm"] = lm.state_dict()
            p = os.path.join(O["checkpoint_dir"], dc.ckpt_name(epoch, step))
            dc.save_atomic(ck, p)
            log("saved %s%s" % (p, " (best so far: best_model.pt)" if is_best else ""))
        best = dc.broadcast_obj(c, best)
    if tb:
        tb.close()
    log("done: epochs=%d %s wall=%.1fs" % (T["num_epochs"], last_line, time.time() - t_run))
    dc.finish(c)


if __name__ == "__main__":
    main()
