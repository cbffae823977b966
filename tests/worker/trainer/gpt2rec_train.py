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
  convert     the program's own epoch checkpoints after two epochs (ID-only, cached, dynamic),
              as saved and with DDP's "module." prefix, through
              examples/convert_pytorch_checkpoint.py: ctrain --inference_only gives the
              validation and test HR@10 and NDCG@10 of the program's evaluate() on the same
              weights within 1e-5; a ctrain dynamic checkpoint turned into a .pt (--to-pth)
              likewise; the cached file under --text_mode dynamic (the LM from --lm_dir, the
              program's --init_from); a file of another mode, another embed_dim, a truncated
              safetensors file and a truncated .pt: exit 1 and one line;
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
    import numpy as np
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

# convert: the program's own checkpoints through examples/convert_pytorch_checkpoint.py
print("convert")


def ref_eval(state, text_dim=0, gpt2=None, cache=None):
    """The program's evaluation (its evaluate() and scorer(), its data handling) of a state dict
    ("module." prefix or not): {(split, metric): value}."""
    raw_u, raw_i, times = gd.read_ratings(DATA)
    _, users = np.unique(raw_u, return_inverse=True)
    _, items = np.unique(raw_i, return_inverse=True)
    part = gd.split_per_user(users, times, [0.8, 0.1, 0.1])
    ut, it = torch.from_numpy(users), torch.from_numpy(items)
    train_mat = torch.zeros((n_users, n_items), dtype=torch.bool)
    train_mat[ut[part == 0], it[part == 0]] = True
    val_mat = torch.zeros_like(train_mat)
    val_mat[ut[part == 1], it[part == 1]] = True

    def targets_of(p):
        d = {}
        for u, i in zip(users[part == p].tolist(), items[part == p].tolist()):
            d.setdefault(u, []).append(i)
        return {u: torch.tensor(sorted(set(v))) for u, v in d.items()}
    z = torch.zeros(0)
    model = gd.Recommender(n_users, n_items, DIM, text_dim, gpt2, tokens if gpt2 else z,
                           tmask if gpt2 else z, cache if cache is not None else z)
    model.load_state_dict(gd.dc.strip_module(state))
    model.eval()
    c, out = gd.dc.Ctx(), {}
    for split, p, excl in (("valid", 1, train_mat), ("test", 2, train_mat | val_mat)):
        t = targets_of(p)
        m = gd.evaluate(c, gd.scorer(model), torch.tensor(sorted(t), dtype=torch.long), t, excl)
        out[(split, "hr@10")], out[(split, "ndcg@10")] = m["HR@10"], m["NDCG@10"]
    return out


def summary(stdout):
    line = [x for x in stdout.splitlines() if x.startswith("# summary: ")]
    return json.loads(line[-1][len("# summary: "):])


CONVERT = os.path.join(os.path.dirname(os.path.dirname(EXAMPLE)), "convert_pytorch_checkpoint.py")
conv_modes = (("ID-only", ["--id_only"], []),
              ("cached", ["--item_text", ITEMS, "--gpt2_path", lm, "--use_cache"],
               ["--lm_dir", lm, "--item_text", ITEMS]),
              ("dynamic", ["--item_text", ITEMS, "--gpt2_path", lm, "--text_lr", str(LM_LR)],
               ["--lm_dir", lm, "--item_text", ITEMS, "--text_mode", "dynamic"]))
converted = {}
for mode, py_flags, c_flags in conv_modes:
    sd_dir = os.path.join(ROOT, "py_conv_" + mode)
    run([sys.executable, EXAMPLE, "--dataset", DATA, "--epochs", "2", "--embed_dim", str(DIM),
         "--seed", str(SEED), "--batch_size", "512", "--lr", str(LR), "--save_dir", sd_dir,
         "--cpu"] + py_flags)
    ck_path = os.path.join(sd_dir, sorted(f for f in os.listdir(sd_dir)
                                          if f.startswith("epoch_2_"))[0])
    ck = torch.load(ck_path)
    gpt2 = transformers.GPT2Model.from_pretrained(lm) if mode == "dynamic" else None
    want = ref_eval(ck["model"], 0 if mode == "ID-only" else 32, gpt2,
                    cache if mode == "cached" else None)
    # the same weights under DistributedDataParallel's "module." names
    ddp_path = os.path.join(ROOT, "conv_%s_ddp.pt" % mode)
    torch.save(dict(ck, model={"module." + k: v for k, v in ck["model"].items()}), ddp_path)
    for src in (ck_path, ddp_path):
        dst = os.path.join(ROOT, os.path.basename(src) + "." + mode + ".safetensors")
        out = run([sys.executable, CONVERT, src, dst])
        if "gpt2rec, %s" % mode not in out:
            print("FAIL: the converter did not recognise the %s checkpoint: %s" % (mode, out))
            sys.exit(1)
        out, _ = ctrain("c_conv", ["--state_dict_path", dst, "--inference_only"] + c_flags,
                        512, 1)
        got = summary(out)["metrics"]
        for (split, metric), w in want.items():
            close("%s %s%s %s" % (mode, "module. " if src == ddp_path else "", split, metric),
                  got[split][metric], w, 1e-5)
        converted[mode] = dst
    states = globals().setdefault("states", {})
    states[mode] = ck["model"]
    # the other direction: ctrain's checkpoint as a .pt the program evaluates
    if mode == "dynamic":
        _, d = ctrain("c_conv_back", ["--state_dict_path", dst] + c_flags, 512, 1)
        back = os.path.join(ROOT, "back.pt")
        run([sys.executable, CONVERT, "--to-pth", os.path.join(d, "final.safetensors"), back])
        want = ref_eval(torch.load(back), 32, transformers.GPT2Model.from_pretrained(lm))
        out, _ = ctrain("c_conv", ["--state_dict_path", os.path.join(d, "final.safetensors"),
                                   "--inference_only"] + c_flags, 512, 1)
        got = summary(out)["metrics"]
        for (split, metric), w in want.items():
            close("ctrain -> .pt %s %s" % (split, metric), got[split][metric], w, 1e-5)

# phase 1 -> phase 2: a cached-mode file starts the fine-tuning, the LM from --lm_dir (the
# program's --init_from)
gpt2 = transformers.GPT2Model.from_pretrained(lm)
state = dict(states["cached"], **{"gpt2." + k: v for k, v in gpt2.state_dict().items()})
want = ref_eval(state, 32, gpt2)
out, _ = ctrain("c_conv", ["--state_dict_path", converted["cached"], "--inference_only"]
                + conv_modes[2][2], 512, 1)
got = summary(out)["metrics"]
for (split, metric), w in want.items():
    close("cached file, --text_mode dynamic %s %s" % (split, metric), got[split][metric], w, 1e-5)

# a file of another mode, or a damaged one: exit 1 and one line naming the tensor or the file
c_base = [CTRAIN, "--model", "gpt2rec", "--dataset", DATA, "--embed_dim", str(DIM),
          "--inference_only", "--train_dir", os.path.join(ROOT, "c_conv_bad")]
expect_fail(c_base + ["--state_dict_path", converted["dynamic"]] + conv_modes[1][2],
            '"gpt2.')
expect_fail(c_base + ["--state_dict_path", converted["cached"]], '"proj.')
expect_fail(c_base + ["--state_dict_path", converted["ID-only"]] + conv_modes[1][2],
            '"proj.weight"')
expect_fail(c_base[:6] + ["32"] + c_base[7:] + ["--state_dict_path", converted["ID-only"]],
            '"user.weight" has shape')
with open(converted["cached"], "rb") as f:
    blob = f.read()
bad = os.path.join(ROOT, "truncated.safetensors")
with open(bad, "wb") as f:
    f.write(blob[: len(blob) - 100])
expect_fail(c_base + ["--state_dict_path", bad] + conv_modes[1][2], bad)
bad_pt = os.path.join(ROOT, "truncated.pt")
with open(os.path.join(ROOT, "conv_cached_ddp.pt"), "rb") as f:
    blob = f.read()
with open(bad_pt, "wb") as f:
    f.write(blob[: len(blob) // 2])
expect_fail([sys.executable, CONVERT, bad_pt, os.path.join(ROOT, "never.safetensors")], bad_pt)
if os.path.exists(os.path.join(ROOT, "never.safetensors")):
    print("FAIL: the converter left a file behind for a damaged checkpoint")
    sys.exit(1)

# resume: a kill under ctrun, then the exact resume
print("resume")
base = ["--state_dict_path", os.path.join(ROOT, "init_txt.safetensors"), "--lm_dir", lm,
        "--item_text", ITEMS,
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
