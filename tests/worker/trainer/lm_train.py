"""lm_train.py CTRAIN CTRUN DIR DRIVER - ctrain --model lm against transformers (test_lm_train.c runs it
with the PyTorch 2.x interpreter).

For a tiny GPT-2 (GPT2LMHeadModel, tied, --maxlen below its positions) and a tiny Qwen2
(Qwen2ForCausalLM, untied, grouped-query attention, cut at its max positions), each with a
byte-level BPE tokenizer trained here with `tokenizers` and saved as tokenizer.json:

  inference   ctrain --inference_only (1 rank, and 2 ranks under ctrun) against transformers'
              mean next-token cross-entropy over every predicted token of every line
              (each line tokenized on its own, no special tokens, cut): within 1e-5 relative;
  training    ten optimizer steps of ctrain (1 rank; 2 ranks under ctrun on the CPU ring with
              --grad_accum 2; and 1 rank with --freeze) against the same steps in PyTorch;
              with --grad_checkpointing the 1-rank run's numbers bit for bit:
              every step's batch is every line (batch_size >= lines: one step per epoch, so
              both sides see the same rows), loss = sum of the cross-entropies / their count,
              clip_grad_norm_(1.0), Adam(lr 1e-3, betas (0.9, 0.98), eps 1e-8), frozen tensors
              with requires_grad False and out of the optimizer. Every step's training loss and
              the validation lm_loss after it (metrics.jsonl) within 1e-4;
  shuffled    three epochs of 4-line batches (the last one 2 lines): ctrain on 1 rank and on 2
              ranks against PyTorch taking the lines in the order ctrain's seeded shuffle
              gives (DRIVER perm SEED N EPOCHS prints it): each epoch's mean training loss
              and the validation lm_loss after it within 1e-4;
  errors      a line that is not UTF-8, a --freeze prefix that names nothing, --mhc, a file
              with no line to predict: exit 1 and one line naming the file and line or flag;
  --save_hf   the folder ctrain writes after training loads in transformers
              (AutoModelForCausalLM) with the weights and logits of the PyTorch run (1e-4), and
              ctrain --inference_only on it gives transformers' lm_loss (1e-5 relative).

Exit 77 when torch, transformers or tokenizers cannot be imported; 1 on the first mismatch.
"""
import json
import math
import os
import subprocess
import sys

try:
    import torch
    import torch.nn.functional as F
    import transformers
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
except ImportError as e:  # the C driver passes 77 on: a skip
    print("skip: %s" % e)
    sys.exit(77)

CTRAIN, CTRUN, ROOT, DRIVER = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
STEPS, LR, CLIP, SEED = 10, 1e-3, 1.0, 7
QWEN2_PAT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+"""
             r"""[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Toy Story (1995) is an animated film; GoldenEye (1995) is not.",
    "We'll train a tiny model, they've said, and it's going to work.",
    "Digits 0123456789 and numbers like 3.14159, 2,718 and 1e-4.",
    "Caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00c5ngstr\u00f6m \u6771\u4eac\u90fd 2024\u5e74",
    "   leading spaces and trailing spaces   ",
    "tabs\tand\t\ttabs, a  b   c    d",
    "City of Lost Children, The (Cit\u00e9 des enfants perdus, La) (1995)",
    "Usual Suspects, The (1995) Seven (Se7en) (1995) Heat (1995)",
    "emoji \U0001F600\U0001F680 and more text after them",
]
TRAIN_LINES = CORPUS + [
    "",  # an empty line: no tokens, skipped
    "a",  # one token: nothing to predict
    "the fox and the dog and the fox and the dog and the fox and the dog and the fox and "
    "the dog and the fox and the dog and the fox and the dog, a long line the cut shortens",
    "Short line.",
    "Another line about films (1995) and the dog.",
    "It's 12:30; we'll see 42 films, they've said.",
]
VALID_LINES = [
    "A lazy fox, a quick dog (1996).",
    "Numbers 777 and 31415 in a line.",
    "r\u00e9sum\u00e9 of the films they've seen",
]


def train_tokenizer(kind):
    tok = Tokenizer(models.BPE())
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(QWEN2_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(CORPUS * 3, trainers.BpeTrainer(
        vocab_size=330, special_tokens=["<|endoftext|>"], min_frequency=1,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return tok


def build(kind, vocab):
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            vocab_size=vocab, n_positions=32, n_embd=32, n_layer=2, n_head=4, bos_token_id=0,
            eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=40,
        rope_theta=10000.0, tie_word_embeddings=False))


# kind -> (--maxlen or None, --freeze prefixes)
KINDS = {"gpt2": (24, "transformer.h.0.,transformer.wpe."),
         "qwen2": (None, "model.embed_tokens.,model.layers.1.mlp.")}


def rows(tok, lines, L):
    """Token ids and next-token targets (-100: none), right-padded, of the lines with >= 2
    tokens after the cut at L."""
    kept = []
    for line in lines:
        ids = tok.encode(line, add_special_tokens=False).ids[:L] if line else []
        if len(ids) >= 2:
            kept.append(ids)
    width = max(len(k) for k in kept)
    x = torch.zeros((len(kept), width), dtype=torch.long)
    y = torch.full((len(kept), width), -100, dtype=torch.long)
    for i, k in enumerate(kept):
        x[i, :len(k)] = torch.tensor(k)
        y[i, :len(k) - 1] = torch.tensor(k[1:])
    return x, y


def lm_loss(model, x, y):
    logits = model(input_ids=x).logits
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1),
                           ignore_index=-100, reduction="sum") / (y >= 0).sum()


def run(cmd, timeout=300):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID", "CTRUN_HEARTBEAT_FD")}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    if p.returncode != 0:
        print("FAIL: %s exited %d\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
        sys.exit(1)
    return p.stdout


def expect_fail(cmd, want):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    p = subprocess.run(cmd, capture_output=True, timeout=120, env=env)
    err = p.stderr.decode("utf-8", "replace").strip()
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if p.returncode not in (1, 2) or want not in err or len(lines) != 1:
        print("FAIL: %s: exit %d, stderr %r (expected one line with %r)" % (
            " ".join(cmd), p.returncode, err, want))
        sys.exit(1)
    print("  refused: %s" % lines[0])


def summary(out):
    for line in out.splitlines():
        if line.startswith("# summary: "):
            return json.loads(line[len("# summary: "):])
    print("FAIL: no summary line in\n" + out)
    sys.exit(1)


def metrics(train_dir):
    with open(os.path.join(train_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def close(what, got, want, tol, rel=False):
    err = abs(got - want) / (abs(want) if rel else 1.0)
    print("  %-44s ctrain %.7f transformers %.7f %s %.2e" % (
        what, got, want, "rel" if rel else "abs", err))
    if not (err <= tol):
        print("FAIL: %s off by %.3e (tolerance %g)" % (what, err, tol))
        sys.exit(1)


def reference(model_dir, x, y, vx, vy, frozen):
    """STEPS steps on the whole batch (x, y): the loss of each and the validation loss after."""
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                              torch_dtype=torch.float32).eval()
    prefixes = [p for p in frozen.split(",") if p]
    for name, p in model.named_parameters():
        p.requires_grad_(not any(name.startswith(q) for q in prefixes))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=LR, betas=(0.9, 0.98), eps=1e-8)
    losses, valid = [], []
    for _ in range(STEPS):
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model, x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        losses.append(loss.item())
        with torch.no_grad():
            valid.append(lm_loss(model, vx, vy).item())
    return model, losses, valid


def shuffled_reference(model_dir, x, y, vx, vy, batch, epochs):
    """Epochs of `batch`-line steps in ctrain's order: the mean step loss of each epoch and the
    validation loss after it."""
    n = x.shape[0]
    perms = [[int(v) for v in line.split()] for line in
             run([DRIVER, "perm", str(SEED), str(n), str(epochs)]).splitlines()]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir,
                                                              torch_dtype=torch.float32).eval()
    opt = torch.optim.Adam(model.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-8)
    means, valid = [], []
    for perm in perms:
        losses = []
        for s in range(0, n, batch):
            idx = torch.tensor(perm[s:s + batch])
            opt.zero_grad(set_to_none=True)
            loss = lm_loss(model, x[idx], y[idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
            opt.step()
            losses.append(loss.item())
        means.append(sum(losses) / len(losses))
        with torch.no_grad():
            valid.append(lm_loss(model, vx, vy).item())
    return means, valid


def check_frozen_checkpoints(kind, train_dir, frozen, model_dir):
    """The checkpoints of a --freeze run hold every trainable tensor with its two Adam moments
    and nothing of the frozen ones."""
    from safetensors import safe_open
    prefixes = [p for p in frozen.split(",") if p]
    names = [n for n, _ in transformers.AutoModelForCausalLM.from_pretrained(
        model_dir).named_parameters()]
    trainable = [n for n in names if not any(n.startswith(p) for p in prefixes)]
    files = [os.path.join(r, f) for r, _, fs in os.walk(train_dir) for f in fs
             if f.endswith(".safetensors")]
    if not files:
        print("FAIL: %s: no checkpoint under %s" % (kind, train_dir))
        sys.exit(1)
    for path in files:
        with safe_open(path, "pt") as f:
            keys = set(f.keys())
        want = set(trainable) | {"optimizer.exp_avg." + n for n in trainable} | \
            {"optimizer.exp_avg_sq." + n for n in trainable}
        if keys != want:
            print("FAIL: %s: %s holds %s, expected %s" % (kind, path, sorted(keys ^ want)[:6],
                                                         "the trainable tensors and Adam"))
            sys.exit(1)
    print("  %s: %d checkpoints hold the %d trainable tensors and their Adam moments only" % (
        kind, len(files), len(trainable)))


def check_training(kind, label, train_dir, losses, valid):
    m = metrics(train_dir)
    if len(m) != len(losses):
        print("FAIL: %s: %d evaluations in metrics.jsonl, expected %d" % (label, len(m),
                                                                          len(losses)))
        sys.exit(1)
    worst_t = max(abs(m[i]["train_loss"] - losses[i]) for i in range(len(losses)))
    worst_v = max(abs(m[i]["valid"]["lm_loss"] - valid[i]) for i in range(len(losses)))
    print("  %s %s: losses %s" % (kind, label, " ".join("%.5f" % v for v in losses)))
    close("%s %s: worst step loss" % (kind, label), worst_t + losses[0], losses[0], 1e-4)
    close("%s %s: worst validation lm_loss" % (kind, label), worst_v + valid[0], valid[0], 1e-4)
    if abs(losses[-1] - losses[0]) < 1e-3:
        print("FAIL: %s %s: the loss did not move in %d steps" % (kind, label, STEPS))
        sys.exit(1)


def main():
    torch.manual_seed(0)
    for kind, (maxlen, frozen) in KINDS.items():
        d = os.path.join(ROOT, kind)
        tok = train_tokenizer(kind)
        model = build(kind, tok.get_vocab_size()).float().eval()
        with torch.no_grad():
            for _, p in model.named_parameters():
                p.normal_(0.0, 0.15)
        model.save_pretrained(d)
        tok.save(os.path.join(d, "tokenizer.json"))
        L = maxlen or model.config.max_position_embeddings
        data, vdata = os.path.join(ROOT, "train.txt"), os.path.join(ROOT, "valid.txt")
        with open(data, "w", encoding="utf-8") as f:
            f.write("\n".join(TRAIN_LINES) + "\n")
        with open(vdata, "w", encoding="utf-8") as f:
            f.write("\n".join(VALID_LINES) + "\n")
        x, y = rows(tok, TRAIN_LINES, L)
        vx, vy = rows(tok, VALID_LINES, L)
        n = x.shape[0]
        print("%s: %s, vocab %d, %d lines with a prediction, %d tokens per line at most" % (
            kind, type(model).__name__, tok.get_vocab_size(), n, L))
        base = ["--model", "lm", "--lm_dir", d, "--seed", str(SEED), "--num_workers", "0"]
        if maxlen:
            base += ["--maxlen", str(maxlen)]

        # inference: 1 rank, 2 ranks
        with torch.no_grad():
            want = lm_loss(model, x, y).item()
        got = summary(run([CTRAIN] + base + ["--dataset", data, "--inference_only",
                                             "--batch_size", "4"]))
        close("%s inference_only lm_loss, 1 rank" % kind, got["lm_loss"], want, 1e-5, rel=True)
        close("%s perplexity" % kind, got["perplexity"], math.exp(want), 1e-5, rel=True)
        got = summary(run([CTRUN, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0",
                           CTRAIN] + base + ["--dataset", data, "--inference_only",
                                             "--batch_size", "4"]))
        close("%s inference_only lm_loss, 2 ranks" % kind, got["lm_loss"], want, 1e-5, rel=True)

        # bad input
        bad = os.path.join(ROOT, "bad.txt")
        with open(bad, "wb") as f:
            f.write(b"fine line one\nfine line two\nbroken \xff\xfe here\n")
        expect_fail([CTRAIN] + base + ["--dataset", bad, "--inference_only"], bad + ":3:")
        empty = os.path.join(ROOT, "empty.txt")
        with open(empty, "w") as f:
            f.write("a\n\n")
        expect_fail([CTRAIN] + base + ["--dataset", empty, "--train_dir",
                                       os.path.join(ROOT, "x")], empty + ": no line")
        expect_fail([CTRAIN] + base + ["--dataset", data, "--train_dir", os.path.join(ROOT, "x"),
                                       "--freeze", "nothing.like.this"], "nothing.like.this")
        expect_fail([CTRAIN] + base + ["--dataset", data, "--mhc"], "--mhc")

        # training
        train = base + ["--dataset", data, "--eval_dataset", vdata, "--num_epochs", str(STEPS),
                        "--eval_every", "1", "--lr", str(LR), "--grad_clip", str(CLIP)]
        ref_model, losses, valid = reference(d, x, y, vx, vy, "")
        t1, hf = os.path.join(ROOT, kind + "_1rank"), os.path.join(ROOT, kind + "_hf")
        run([CTRAIN] + train + ["--train_dir", t1, "--batch_size", str(n), "--save_hf", hf])
        check_training(kind, "1 rank", t1, losses, valid)
        t2 = os.path.join(ROOT, kind + "_2ranks")
        run([CTRUN, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0", CTRAIN] +
            train + ["--train_dir", t2, "--batch_size", str((n + 1) // 2), "--grad_accum", "2"])
        check_training(kind, "2 ranks, grad_accum 2", t2, losses, valid)
        _, flosses, fvalid = reference(d, x, y, vx, vy, frozen)
        tf = os.path.join(ROOT, kind + "_frozen")
        out = run([CTRAIN] + train + ["--train_dir", tf, "--batch_size", str(n),
                                      "--freeze", frozen])
        check_training(kind, "--freeze " + frozen, tf, flosses, fvalid)
        print("  " + [ln for ln in out.splitlines() if "parameters trained" in ln][0])
        check_frozen_checkpoints(kind, tf, frozen, d)
        # exact resume: 4 steps, then the same run to 10 from its checkpoint
        tr = os.path.join(ROOT, kind + "_resumed")
        first = [CTRAIN] + train + ["--train_dir", tr, "--batch_size", str(n), "--freeze", frozen]
        run([a if a != str(STEPS) else "4" for a in first])
        out = run(first)
        if "# resumed from" not in out:
            print("FAIL: %s: the second run did not resume\n%s" % (kind, out))
            sys.exit(1)
        def numbers(d):  # every record without its speed
            return [{k: v for k, v in m.items() if k != "positions_per_s"} for m in metrics(d)]
        if numbers(tr) != numbers(tf):
            print("FAIL: %s: the resumed run's metrics differ from the straight run's" % kind)
            sys.exit(1)
        print("  %s: 4 steps + resumed to %d = the straight run, bit for bit" % (kind, STEPS))
        # --grad_checkpointing: the blocks computed again in the backward, the same numbers
        tg = os.path.join(ROOT, kind + "_recompute")
        out = run([CTRAIN] + train + ["--train_dir", tg, "--batch_size", str(n),
                                      "--grad_checkpointing"])
        if "recomputed by --grad_checkpointing" not in out or numbers(tg) != numbers(t1):
            print("FAIL: %s: --grad_checkpointing changed the run (or did not say so)\n%s" %
                  (kind, out))
            sys.exit(1)
        print("  %s: --grad_checkpointing = the 1-rank run, bit for bit" % kind)

        # shuffled 4-line batches over three epochs, 1 and 2 ranks
        means, svalid = shuffled_reference(d, x, y, vx, vy, 4, 3)
        shuffled = list(train)
        shuffled[shuffled.index("--num_epochs") + 1] = "3"
        ts = os.path.join(ROOT, kind + "_shuffled")
        run([CTRAIN] + shuffled + ["--train_dir", ts, "--batch_size", "4"])
        check_training(kind, "4-line batches, 1 rank", ts, means, svalid)
        ts2 = os.path.join(ROOT, kind + "_shuffled2")
        run([CTRUN, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0", CTRAIN] +
            shuffled + ["--train_dir", ts2, "--batch_size", "4"])
        check_training(kind, "4-line batches, 2 ranks", ts2, means, svalid)

        # --save_hf: transformers loads it, with the PyTorch run's weights and logits
        saved = transformers.AutoModelForCausalLM.from_pretrained(
            hf, torch_dtype=torch.float32).eval()
        ref_sd = ref_model.state_dict()
        worst = max((saved.state_dict()[k] - ref_sd[k]).abs().max().item() for k in ref_sd)
        close("%s --save_hf: worst weight" % kind, worst, 0.0, 1e-4)
        with torch.no_grad():
            lg = (saved(input_ids=x).logits - ref_model(input_ids=x).logits).abs().max().item()
            want = lm_loss(saved, x, y).item()
        close("%s --save_hf: worst logit" % kind, lg, 0.0, 1e-4)
        got = summary(run([CTRAIN, "--model", "lm", "--lm_dir", hf, "--dataset", data,
                           "--inference_only", "--batch_size", "8"] +
                          (["--maxlen", str(maxlen)] if maxlen else [])))
        close("%s --save_hf folder: inference lm_loss" % kind, got["lm_loss"], want, 1e-5,
              rel=True)
    print("ok")


main()
