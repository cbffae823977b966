"""gpt2rec_train.py CTRAIN CTRUN EXAMPLE DIR DRIVER - ctrain --model gpt2rec against
examples/pytorch/gpt2rec_ddp.py (test_gpt2rec_train.c runs it with the PyTorch 2.x interpreter).

On the program's synthetic ratings and titles (make_smoke_data) and, for the text side, a tiny
GPT-2 (GPT2LMHeadModel, 2 layers, width 32) with a byte-level BPE tokenizer trained here:

  id_only     the program's initial weights (--id_only --export_init, no training) loaded by
              ctrain (--state_dict_path); twenty optimizer steps of one batch holding every
              training interaction (one step per epoch), the reference side taking the rows
              ctrain trains on (DRIVER batches prints them: its shuffle and keyed negatives)
              through the program's own bpr_step (BPR + L2 penalty, Adam): every step's loss
              within 1e-4, and the loss must fall;
  shuffled    three epochs of 1000-interaction batches (the last one partial): each epoch's
              mean step loss within 1e-4, ctrain on 1 rank and on 2 ranks under ctrun;
  cached      the same with the text side: --gpt2_path / --lm_dir the tiny GPT-2, --use_cache /
              cached embeddings; ctrain's cache file equal to the program's text_embeddings
              (1e-5), twenty steps' losses within 1e-4, then a 2-rank run that reuses the cache
              file and gives the same losses;
  dynamic     the tiny GPT-2 fine-tuned with the recommender (the program without --use_cache,
              --text_lr; ctrain --text_mode dynamic --lm_lr): twenty steps' losses within 1e-4
              on 1 and 2 ranks, and the LM's weights must move;
  resume      2 ranks under ctrun, 24 steps, checkpoints every 3 steps, a rank killed at step
              10 (ctrun --inject) and restarted: final.safetensors (weights and Adam moments)
              bit-identical to an uninterrupted run's;
  devices     --device auto trains on the CPU with at most one warning line;
  errors      a ratings row and an item-text row that do not parse: exit 1 and one line
              naming the file and line.

Exit 77 when torch, transformers, tokenizers or safetensors cannot be imported; 1 on the first
mismatch.
"""
import importlib.util
import json
import os
import subprocess
import sys

try:
    import torch
    import transformers
    from safetensors.torch import load_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:  # the C driver passes 77 on: a skip
    print("skip: %s" % e)
    sys.exit(77)

CTRAIN, CTRUN, EXAMPLE, ROOT, DRIVER = sys.argv[1:6]
transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()
SEED, DIM, LR, L2, STEPS, LM_LR = 3, 16, 5e-3, 1e-4, 20, 1e-3

spec = importlib.util.spec_from_file_location("gpt2rec_ddp", EXAMPLE)
gd = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gd)


def env():
    return {k: v for k, v in os.environ.items()
            if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", "GROUP_RANK", "TORCHELASTIC_RUN_ID",
                         "CTRUN_HEARTBEAT_FD")}


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env())
    if p.returncode != 0:
        print("FAIL: %s exited %d\n%s\n%s" % (" ".join(cmd), p.returncode, p.stdout[-3000:],
                                               p.stderr[-3000:]))
        sys.exit(1)
    return p.stdout


def expect_fail(cmd, want):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env())
    err = p.stderr.strip()
    if p.returncode == 0 or want not in err or len(err.splitlines()) != 1:
        print("FAIL: %s: exit %d, expected one line with %r, got %r" % (
            " ".join(cmd), p.returncode, want, err))
        sys.exit(1)
    print("  error: %s" % err)


def metrics(train_dir):
    with open(os.path.join(train_dir, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f if line.strip()]


def close(what, got, want, tol):
    err = abs(got - want)
    print("  %-44s ctrain %.7f reference %.7f abs %.2e" % (what, got, want, err))
    if not err <= tol:
        print("FAIL: %s: %.8f vs %.8f (tolerance %g)" % (what, got, want, tol))
        sys.exit(1)


def batches(data, batch, epochs):
    out = run([DRIVER, "batches", data, "0.8,0.1,0.1", str(SEED), str(batch), str(epochs)])
    steps = []
    for line in out.splitlines():
        rows = [tuple(int(x) for x in r.split(",")) for r in line.split()]
        steps.append(tuple(torch.tensor(c) for c in zip(*rows)))
    return steps


def catalogue(data, item_text):
    """n_users, n_items and the item texts, as the program numbers them."""
    raw_u, raw_i, _ = gd.read_ratings(data)
    iids = sorted(set(raw_i.tolist()))
    texts = None
    if item_text:
        tr = gd.read_item_text(item_text)
        texts = [tr.get(int(i), "item %d" % int(i)) for i in iids]
    return len(set(raw_u.tolist())), len(iids), texts


def reference(init, steps, n_users, n_items, text_dim=0, cache=None, gpt2=None, tokens=None):
    """The losses of the program's bpr_step on the given rows from the exported weights (with
    gpt2: fine-tuned at LM_LR, the program's two parameter groups)."""
    torch.manual_seed(0)
    z = torch.zeros(0)
    model = gd.Recommender(n_users, n_items, DIM, text_dim, gpt2,
                           tokens[0] if tokens else z, tokens[1] if tokens else z,
                           cache if cache is not None else z)
    model.load_state_dict(load_file(init))
    groups = [{"params": [p for k, p in model.named_parameters() if not k.startswith("gpt2.")],
               "lr": LR}]
    if gpt2 is not None:
        groups.append({"params": list(gpt2.parameters()), "lr": LM_LR})
        model.train()
    opt = torch.optim.Adam(groups)
    return [gd.bpr_step(model, opt, u, p, n, L2) for u, p, n in steps]


def export_init(name, extra):
    path = os.path.join(ROOT, name + ".safetensors")
    run([sys.executable, EXAMPLE, "--dataset", DATA, "--epochs", "0", "--embed_dim", str(DIM),
         "--seed", str(SEED), "--save_dir", os.path.join(ROOT, "py_" + name), "--cpu",
         "--export_init", path] + extra)
    return path


def ctrain(name, extra, batch, epochs, ranks=1, resume_never=False):
    d = os.path.join(ROOT, name)
    cmd = [CTRAIN, "--model", "gpt2rec", "--dataset", DATA, "--embed_dim", str(DIM),
           "--seed", str(SEED), "--lr", str(LR), "--l2_emb", str(L2), "--batch_size", str(batch),
           "--num_epochs", str(epochs), "--eval_every", "1", "--train_dir", d,
           "--num_workers", "0"] + extra + (["--resume", "never"] if resume_never else [])
    if ranks > 1:
        cmd = [CTRUN, "--standalone", "--nproc_per_node", str(ranks), "--max_restarts", "0"] + cmd
    return run(cmd), d


def compare_steps(what, train_dir, want):
    got = [m["train_loss"] for m in metrics(train_dir)]
    if len(got) != len(want):
        print("FAIL: %s: %d evaluations, expected %d" % (what, len(got), len(want)))
        sys.exit(1)
    for k, (g, w) in enumerate(zip(got, want)):
        close("%s step %d loss" % (what, k + 1), g, w, 1e-4)
    if not want[-1] < want[0] - 0.01:
        print("FAIL: %s: the loss did not fall (%.5f -> %.5f)" % (what, want[0], want[-1]))
        sys.exit(1)


def tiny_gpt2(texts):
    d = os.path.join(ROOT, "tiny_gpt2")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(texts, trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<|endoftext|>"], min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    torch.manual_seed(11)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=tok.get_vocab_size(), n_positions=64, n_embd=32, n_layer=2, n_head=4,
        bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0))
    model.save_pretrained(d)
    tok.save(os.path.join(d, "tokenizer.json"))
    return d


os.makedirs(ROOT, exist_ok=True)
gd.make_smoke_data(os.path.join(ROOT, "data"))
DATA, ITEMS = os.path.join(ROOT, "data", "u.data"), os.path.join(ROOT, "data", "u.item")
n_users, n_items, texts = catalogue(DATA, ITEMS)
print("smoke data: %d users, %d items" % (n_users, n_items))

# id_only: twenty full-batch steps
print("id_only")
init = export_init("init_id", ["--id_only"])
steps = batches(DATA, 4096, STEPS)
if len(steps) != STEPS:
    print("FAIL: expected one batch per epoch, got %d steps" % len(steps))
    sys.exit(1)
want = reference(init, steps, n_users, n_items)
ctrain("c_id", ["--state_dict_path", init], 4096, STEPS)
compare_steps("id_only", os.path.join(ROOT, "c_id"), want)

# shuffled: partial batches, 1 and 2 ranks
print("shuffled")
steps = batches(DATA, 1000, 3)
per_epoch = len(steps) // 3
losses = reference(init, steps, n_users, n_items)
want = [sum(losses[e * per_epoch:(e + 1) * per_epoch]) / per_epoch for e in range(3)]
for ranks in (1, 2):
    _, d = ctrain("c_shuf%d" % ranks, ["--state_dict_path", init], 1000, 3, ranks)
    got = [m["train_loss"] for m in metrics(d)]
    for e in range(3):
        close("shuffled %d rank(s) epoch %d mean loss" % (ranks, e + 1), got[e], want[e], 1e-4)

# cached: the tiny GPT-2's text embeddings
print("cached")
lm = tiny_gpt2(texts)
init = export_init("init_txt", ["--item_text", ITEMS, "--gpt2_path", lm, "--use_cache"])
tok = gd.TextTokenizer(lm, None, texts, 0, None)
tokens, tmask = gd.token_matrix(tok, texts, 24)
gpt2 = transformers.GPT2Model.from_pretrained(lm)
cache = gd.text_embeddings(gpt2, tokens, tmask, "cpu")
steps = batches(DATA, 4096, STEPS)
want = reference(init, steps, n_users, n_items, gpt2.config.n_embd, cache)
out, d = ctrain("c_txt", ["--state_dict_path", init, "--lm_dir", lm, "--item_text", ITEMS],
                4096, STEPS)
files = [f for f in os.listdir(d) if f.startswith("text_cache_")]
if len(files) != 1 or "computed" not in out:
    print("FAIL: expected one computed text cache in %s, found %s" % (d, files))
    sys.exit(1)
mine = load_file(os.path.join(d, files[0]))["text"]
close("cached text embeddings, max abs difference", float((mine - cache).abs().max()), 0.0,
      1e-5)
compare_steps("cached", d, want)
out, _ = ctrain("c_txt", ["--state_dict_path", init, "--lm_dir", lm, "--item_text", ITEMS],
                4096, STEPS, ranks=2, resume_never=True)
if "reused" not in out:
    print("FAIL: the second run did not reuse the text cache:\n%s" % out[:2000])
    sys.exit(1)
compare_steps("cached, 2 ranks, cache reused", d, want)

# dynamic: the tiny GPT-2 fine-tuned with the recommender, 1 and 2 ranks
print("dynamic")
init = export_init("init_dyn", ["--item_text", ITEMS, "--gpt2_path", lm, "--text_lr",
                                str(LM_LR)])
gpt2 = transformers.GPT2Model.from_pretrained(lm)
want = reference(init, steps, n_users, n_items, gpt2.config.n_embd, None, gpt2, (tokens, tmask))
for ranks in (1, 2):
    out, d = ctrain("c_dyn%d" % ranks, ["--state_dict_path", init, "--lm_dir", lm, "--item_text",
                                        ITEMS, "--text_mode", "dynamic", "--lm_lr", str(LM_LR)],
                    4096, STEPS, ranks)
    compare_steps("dynamic, %d rank(s)" % ranks, d, want)
a, b = load_file(init), load_file(os.path.join(d, "final.safetensors"))
moved = float((a["gpt2.h.0.attn.c_attn.weight"] - b["gpt2.h.0.attn.c_attn.weight"]).abs().max())
if not moved > 1e-4:
    print("FAIL: dynamic mode left the LM as it was (max change %g)" % moved)
    sys.exit(1)
print("  the LM's gpt2.h.0.attn.c_attn.weight moved by up to %.2e" % moved)

# resume: a kill under ctrun, then the exact resume
print("resume")
base = ["--state_dict_path", init, "--lm_dir", lm, "--item_text", ITEMS,
        "--ckpt_every_steps", "3"]
ctrain("c_whole", base, 512, 3, ranks=2)
d = os.path.join(ROOT, "c_killed")
p = subprocess.run([CTRUN, "--standalone", "--nproc_per_node", "2", "--max_restarts", "2",
                    "--inject", "kill:rank=any:at=step=10", "--inject_seed", "5", CTRAIN,
                    "--model", "gpt2rec", "--dataset", DATA, "--embed_dim", str(DIM),
                    "--seed", str(SEED), "--lr", str(LR), "--l2_emb", str(L2),
                    "--batch_size", "512", "--num_epochs", "3", "--eval_every", "1",
                    "--train_dir", d, "--num_workers", "0"] + base,
                   capture_output=True, text=True, timeout=300, env=env())
if p.returncode != 0 or "# resumed from" not in p.stdout or "CTRUN_INJECT=kill@" not in p.stderr:
    print("FAIL: killed run: exit %d\n%s\n%s" % (p.returncode, p.stdout[-2000:],
                                                 p.stderr[-2000:]))
    sys.exit(1)
a = load_file(os.path.join(ROOT, "c_whole", "final.safetensors"))
b = load_file(os.path.join(d, "final.safetensors"))
if sorted(a) != sorted(b) or not all(torch.equal(a[k], b[k]) for k in a):
    bad = [k for k in a if k not in b or not torch.equal(a[k], b[k])]
    print("FAIL: the resumed run's final.safetensors differs from the uninterrupted one (%s)"
          % bad[:4])
    sys.exit(1)
print("  final.safetensors after a kill at step 10 and the resume: %d tensors bit-identical"
      % len(a))

# --device auto: the CPU, with at most one warning line (a CUDA build says it falls back)
p = subprocess.run([CTRAIN, "--model", "gpt2rec", "--dataset", DATA, "--num_epochs", "1",
                    "--device", "auto", "--train_dir", os.path.join(ROOT, "c_auto")],
                   capture_output=True, text=True, timeout=120, env=env())
warns = [x for x in p.stderr.splitlines() if "warn" in x]
if p.returncode != 0 or len(warns) > 1 or (warns and "--device auto" not in warns[0]):
    print("FAIL: --device auto: exit %d, stderr %r" % (p.returncode, p.stderr[-1000:]))
    sys.exit(1)
print("  --device auto: trained on the CPU (%s)" % (warns[0] if warns else "no GPU build"))

# errors
print("errors")
bad = os.path.join(ROOT, "bad.data")
with open(bad, "w") as f:
    f.write("1\t2\t3\t880000000\n2\t3\t4\t880000001\n3\tx\t5\t880000002\n")
expect_fail([CTRAIN, "--model", "gpt2rec", "--dataset", bad, "--train_dir",
             os.path.join(ROOT, "c_bad")], bad + ":3:")
bad_items = os.path.join(ROOT, "bad.item")
with open(bad_items, "w") as f:
    f.write("1\tA film | Drama\nnot an item line\n")
expect_fail([CTRAIN, "--model", "gpt2rec", "--dataset", DATA, "--item_text", bad_items,
             "--lm_dir", lm, "--train_dir", os.path.join(ROOT, "c_bad2")], bad_items + ":2:")
print("ok")
