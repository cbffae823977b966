"""temporal_fly.py - ctrain --model temporal without --dataset (the curves generated at start)
against the same run on the cache ctrain --pregenerate writes with the same seed, count and
length, run by test_temporal_train.c with the PyTorch 2.x interpreter:

    temporal_fly.py CTRAIN CTRUN DIR

  1. stage reconstruct, three epochs: every metrics.jsonl record (train_loss, val_loss,
     baseline_val_loss) and the final weights equal bit for bit, with the flags (--num_samples,
     --seq_len, --data_seed) and with a --config file giving data.num_samples, data.seq_len,
     data.seed and data.cache_dir null; the header names the generated data and the split the
     reference's (the last max(1, floor(N * val_fraction)) curves validate);
  2. stage align through a tiny random Qwen2 (its tokenizer trained on the descriptions): the
     same, the descriptions generated with the curves;
  3. 2 ranks under ctrun on the fly: the 1-rank run's losses within 1e-6;
  4. the guide's checkpoint names (epoch_{e}_step_{s}, best; a run killed under ctrun between
     an epoch's checkpoint and its name gets the name when it resumes; --resume never removes
     an earlier run's), and train.log (in --log_dir or --train_dir; the reference's kinds of
     lines; appended to by a resumed run);
  5. --dataset synthetic:... and --num_samples 1 are one-line errors.

Exits 77 when numpy, torch, transformers or tokenizers is missing (the C side skips).
"""
import json
import os
import re
import subprocess
import sys

try:
    import numpy as np
    import torch  # noqa: F401 (temporal_align builds the LM with it)
    import transformers  # noqa: F401
    from safetensors.numpy import load_file
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402
from temporal_align import make_lm, PROMPT, MAX_TEXT  # noqa: E402

N, S, DSEED, VAL = 120, 32, 5, 0.1
MODEL = ["--patch_len", "4", "--hidden_units", "16", "--num_blocks", "2", "--num_heads", "2",
         "--ff_dim", "24", "--dropout_rate", "0.1", "--mask_ratio", "0.4"]


def run(cmd, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    if check and p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: %s exited %d" % (" ".join(cmd[:4]), p.returncode))
    return p


def records(run_dir):
    """metrics.jsonl without the timing field."""
    out = []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            r = json.loads(line)
            r.pop("positions_per_s", None)
            out.append(r)
    return out


def same_weights(a, b):
    x = load_file(os.path.join(a, "final.safetensors"))
    y = load_file(os.path.join(b, "final.safetensors"))
    return sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x)


def base(ctrain, run_dir, extra=()):
    return [ctrain, "--model", "temporal", "--train_dir", run_dir] + MODEL + [
        "--val_fraction", repr(VAL), "--batch_size", "16", "--num_epochs", "3",
        "--eval_every", "1", "--lr", "3e-3", "--warmup_steps", "3", "--seed", "11",
        "--num_workers", "1", "--ckpt_every_steps", "4"] + list(extra)


FLY = ["--num_samples", str(N), "--seq_len", str(S), "--data_seed", str(DSEED)]


def main():
    ctrain, ctrun, d = sys.argv[1:4]
    cache = os.path.join(d, "cache")
    run([ctrain, "--model", "temporal", "--pregenerate", str(N), "--seq_len", str(S), "--seed",
         str(DSEED), "--output_dir", cache])
    failures = []

    def check(cond, what):
        print("%s: %s" % ("ok" if cond else "FAIL", what))
        if not cond:
            failures.append(what)

    # ---- stage reconstruct: the cache, the flags, --config
    rc_dir, rf_dir, ry_dir = (os.path.join(d, x) for x in ("r_cache", "r_fly", "r_yaml"))
    run(base(ctrain, rc_dir, ["--dataset", cache]))
    p = run(base(ctrain, rf_dir, FLY))
    n_val = max(1, int(N * VAL))
    check("# data: generated (data seed %d): %d curves of %d points; %d train, %d validation"
          % (DSEED, N, S, N - n_val, n_val) in p.stdout, "the header names the generated data")
    cfg = os.path.join(d, "fly.yaml")
    with open(cfg, "w") as f:
        f.write("data:\n  cache_dir: null\n  num_samples: %d\n  seq_len: %d\n  seed: %d\n"
                % (N, S, DSEED))
    run(base(ctrain, ry_dir, ["--config", cfg]))
    a, b, c = records(rc_dir), records(rf_dir), records(ry_dir)
    print("stage reconstruct: train_loss per epoch on the cache %s" %
          [r["train_loss"] for r in a])
    check(len(a) == 3 and a == b, "reconstruct: on the fly (flags) = on the cache, bit for bit")
    check(a == c, "reconstruct: on the fly (--config data.*) = on the cache, bit for bit")
    check(same_weights(rc_dir, rf_dir) and same_weights(rc_dir, ry_dir),
          "reconstruct: the final weights equal")
    with open(os.path.join(rf_dir, "args.json")) as f:
        args = json.load(f)
    check(args.get("num_samples") == N and args.get("seq_len") == S and
          args.get("data_seed") == DSEED, "args.json records the generated data's settings")

    # ---- the guide's checkpoint names: epoch_{e}_step_{s} after every epoch (7 steps each),
    # best the epoch of the lowest val_loss; --resume never removes an earlier run's
    names = sorted(n for n in os.listdir(rf_dir) if n.startswith("epoch_"))
    check(names == ["epoch_%d_step_%d.safetensors" % (e, 7 * e) for e in (1, 2, 3)],
          "epoch checkpoints %s" % names)
    vals = [r["valid"]["val_loss"] for r in b]
    e_best = vals.index(min(vals)) + 1
    bx = load_file(os.path.join(rf_dir, "best.safetensors"))
    ex = load_file(os.path.join(rf_dir, "epoch_%d_step_%d.safetensors" % (e_best, 7 * e_best)))
    check(sorted(bx) == sorted(ex) and all(np.array_equal(bx[k], ex[k]) for k in bx),
          "best.safetensors holds the weights of epoch %d, the lowest val_loss %s" % (e_best,
                                                                                      vals))
    fx = load_file(os.path.join(rf_dir, "final.safetensors"))
    lx = load_file(os.path.join(rf_dir, "epoch_3_step_21.safetensors"))
    check(sorted(fx) == sorted(lx) and all(np.array_equal(fx[k], lx[k]) for k in fx),
          "the last epoch's checkpoint is final.safetensors")
    # a kill inside step 14's checkpoint write after `latest` moved to it, before its epoch
    # name: the resumed run names it; every epoch's file equals the uninterrupted run's
    rk_dir = os.path.join(d, "r_kill")
    p = run([ctrun, "--standalone", "--nproc_per_node", "1", "--max_restarts", "1",
             "--inject", "torn_ckpt:at=step=14:phase=latest"] +
            base(ctrain, rk_dir, FLY + ["--eval_every", "3"]), check=False)
    names = sorted(n for n in os.listdir(rk_dir) if n.startswith("epoch_"))
    same = names == ["epoch_%d_step_%d.safetensors" % (e, 7 * e) for e in (1, 2, 3)] and all(
        sorted(x) == sorted(y) and all(np.array_equal(x[k], y[k]) for k in x)
        for x, y in ((load_file(os.path.join(rk_dir, n)), load_file(os.path.join(ry_dir, n)))
                     for n in names))
    check(p.returncode == 0 and "# resumed from %s/step_000000000014.safetensors" % rk_dir in
          p.stdout and same, "killed between step 14's checkpoint and its epoch name: resumed, "
          "named, every epoch's file bit-identical: %s" % names)
    run(base(ctrain, rf_dir, FLY + ["--num_epochs", "1", "--resume", "never"]))
    names = sorted(n for n in os.listdir(rf_dir) if n.startswith("epoch_"))
    check(names == ["epoch_1_step_7.safetensors"], "--resume never: the earlier run's epoch "
          "checkpoints removed: %s" % names)

    # ---- train.log: in --log_dir (else --train_dir), the reference's kinds of lines,
    # appended to by a resumed run
    rl_dir, log_dir = os.path.join(d, "r_log"), os.path.join(d, "logs")
    run(base(ctrain, rl_dir, FLY + ["--log_dir", log_dir, "--log_interval", "3"]))
    check(not os.path.exists(os.path.join(rl_dir, "train.log")), "no train.log in --train_dir "
          "when --log_dir is given")
    with open(os.path.join(log_dir, "train.log")) as f:
        lines = f.read().splitlines()
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d ")
    check(lines and all(stamp.match(x) for x in lines), "every train.log line is time-stamped")
    body = [x[20:] for x in lines]
    print("train.log:\n  " + "\n  ".join(body))
    steps = [int(m.group(2)) for m in (re.match(
        r"epoch (\d+) step (\d+) reconstruct loss [0-9.]+ lr [0-9.e-]+$", x) for x in body) if m]
    check(steps == [3, 6, 9, 12, 15, 18, 21], "a loss line every 3 steps: %s" % steps)
    want = records(rl_dir)
    evals = [re.match(r"epoch (\d)/3 stage=reconstruct step=(\d+) train_loss=([0-9.]+) "
                      r"val_loss=([0-9.]+) baseline_val_loss=([0-9.]+) lr=\S+ time=\S+s "
                      r"samples_per_s=\d+$", x) for x in body]
    evals = [m.groups() for m in evals if m]
    check(len(evals) == 3 and all(
        int(g[0]) == r["epoch"] and int(g[1]) == r["step"] and
        g[2] == "%.4f" % r["train_loss"] and g[3] == "%.4f" % r["valid"]["val_loss"] and
        g[4] == "%.4f" % r["valid"]["baseline_val_loss"] for g, r in zip(evals, want)),
        "an evaluation line per epoch, the numbers of metrics.jsonl")
    saved = [x for x in body if x.startswith("saved ")]
    check(len(saved) == 3 and all("epoch_%d_step_%d.safetensors" % (e, 7 * e) in x
                                  for e, x in zip((1, 2, 3), saved)),
          "a line per epoch checkpoint: %s" % saved)
    check(body[0].startswith("ctrain ") and "--model temporal: world 1" in body[0] and
          any(x.startswith("108 training samples;") for x in body) and
          body[-1].startswith("done: epochs=3 stage=reconstruct step=21 val_loss="),
          "start, data and end lines")
    run(base(ctrain, rl_dir, FLY + ["--log_dir", log_dir, "--log_interval", "3",
                                    "--num_epochs", "4"]))
    with open(os.path.join(log_dir, "train.log")) as f:
        more = f.read().splitlines()
    check(more[:len(lines)] == lines and any(
        "resumed from %s/final.safetensors at epoch 3 step 21" % rl_dir in x
        for x in more[len(lines):]) and more[-1][20:].startswith("done: epochs=4"),
          "a resumed run appends to train.log, with its resume line")
    check(os.path.isfile(os.path.join(rf_dir, "train.log")), "without --log_dir: "
          "--train_dir/train.log")

    # ---- 2 ranks under ctrun, on the fly
    r2 = os.path.join(d, "r_fly2")
    run([ctrun, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0"] +
        base(ctrain, r2, FLY))
    e = records(r2)
    worst = max(abs(x["train_loss"] - y["train_loss"]) for x, y in zip(a, e))
    check(len(e) == 3 and worst < 1e-6, "2 ranks on the fly: losses within 1e-6 of 1 rank's "
          "(%.3g)" % worst)

    # ---- stage align: the descriptions generated with the curves
    _, texts, _ = temporal_curves.read_cache(cache)
    lm_dir = os.path.join(d, "lm")
    make_lm(lm_dir, list(texts[:N - n_val]))
    align = ["--stage", "align", "--lm_dir", lm_dir, "--num_soft_tokens", "2",
             "--max_text_tokens", str(MAX_TEXT), "--prompt", PROMPT]
    ac_dir, af_dir = os.path.join(d, "a_cache"), os.path.join(d, "a_fly")
    run(base(ctrain, ac_dir, ["--dataset", cache] + align))
    run(base(ctrain, af_dir, FLY + align))
    a, b = records(ac_dir), records(af_dir)
    print("stage align: train_loss per epoch on the cache %s, val_loss %s, shuffled %s" % (
        [r["train_loss"] for r in a], a[-1]["valid"]["val_loss"],
        a[-1]["valid"].get("shuffled_val_loss")))
    check(len(a) == 3 and a == b, "align: on the fly = on the cache, bit for bit")
    check(same_weights(ac_dir, af_dir), "align: the final weights equal")

    # ---- errors
    p = run(base(ctrain, os.path.join(d, "bad1"), ["--dataset", "synthetic:users=3"]),
            check=False)
    check(p.returncode != 0 and "--dataset" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, "--dataset synthetic:... refused: %r"
          % p.stderr.strip())
    p = run(base(ctrain, os.path.join(d, "bad2"), ["--num_samples", "1"]), check=False)
    check(p.returncode != 0 and "--num_samples" in p.stderr and
          len(p.stderr.strip().splitlines()) == 1, "--num_samples 1 refused: %r"
          % p.stderr.strip())
    if failures:
        raise SystemExit("FAIL: %d check(s)" % len(failures))
    print("PASS")


if __name__ == "__main__":
    main()
