"""temporal_wordlm.py - ctrain --model temporal --stage align without --lm_dir: the tiny random
Qwen2 with the word-level tokenizer (the reference's lm.path null), run by test_temporal_train.c
with the PyTorch 2.x interpreter:

    temporal_wordlm.py CTRAIN CTRUN DIR

  1. a run on curves generated at start: the LM's vocabulary is the size of the reference's
     WordTokenizer over the same training descriptions and prompt, and its pretraining loss
     falls (the last step's loss below half of the first's);
  2. the same run with --config (lm.* keys) instead of the flags: the same losses, bit for bit;
  3. 2 ranks under ctrun: rank 0 pretrains and sends the LM, so --inference_only of the final
     weights (the validation curves split over the ranks) gives 1 rank's val_loss and
     shuffled_val_loss within 1e-6;
  4. a run under ctrun killed at step 12 (--inject) and restarted: the restart pretrains the LM
     again with the same result, and the final weights equal the uninterrupted run's, bit for
     bit;
  5. sizes that do not fit together: a one-line error.

Exits 77 when numpy, safetensors or tokenizers is missing.
"""
import json
import os
import re
import sys

try:
    import numpy as np
    from safetensors.numpy import load_file
    import tokenizers  # noqa: F401
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402
from temporal_train import run, train_losses  # noqa: E402

try:
    from temporal_encoder_ddp import WordTokenizer  # noqa: E402
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

N, S, VAL, SEED = 80, 32, 0.2, 3
PROMPT = "Describe the curve:"
LM = {"hidden_size": 16, "num_layers": 1, "num_heads": 2, "num_kv_heads": 1,
      "intermediate_size": 32, "seed": 99, "pretrain_steps": 60}


def args(ctrain, run_dir, epochs=5):
    a = [ctrain, "--model", "temporal", "--stage", "align", "--num_samples", str(N),
         "--seq_len", str(S), "--data_seed", str(SEED), "--val_fraction", str(VAL),
         "--train_dir", run_dir, "--patch_len", "4", "--hidden_units", "16", "--num_blocks", "1",
         "--num_heads", "2", "--ff_dim", "24", "--dropout_rate", "0", "--num_soft_tokens", "3",
         "--max_text_tokens", "32", "--batch_size", "16", "--num_epochs", str(epochs),
         "--eval_every", "1", "--lr", "2e-3", "--warmup_steps", "2", "--seed", "5",
         "--num_workers", "0", "--ckpt_every_steps", "5"]
    for k, v in LM.items():
        a += ["--lm_" + k, str(v)]
    return a


def main():
    ctrain, ctrun, d = sys.argv[1:4]
    texts = [temporal_curves.describe(temporal_curves.sample_params(SEED, i)) for i in range(N)]
    n_train = N - max(1, int(N * VAL))
    vocab = WordTokenizer(texts[:n_train] + [PROMPT]).vocab_size

    # ---- 1. the vocabulary and the pretraining loss
    r1 = os.path.join(d, "run1")
    p = run(args(ctrain, r1))
    m = re.search(r"vocabulary (\d+) \(word-level\)", p.stdout)
    if not m or int(m.group(1)) != vocab:
        sys.stdout.write(p.stdout)
        raise SystemExit("FAIL: vocabulary %s, the reference's WordTokenizer has %d" % (
            m.group(1) if m else "?", vocab))
    pre = [(int(a), float(b)) for a, b in
           re.findall(r"# lm: pretraining step (\d+) of \d+: loss ([0-9.]+)", p.stdout)]
    if len(pre) < 2 or pre[0][0] != 1 or pre[-1][0] != LM["pretrain_steps"] or \
            not pre[-1][1] < 0.5 * pre[0][1]:
        sys.stdout.write(p.stdout)
        raise SystemExit("FAIL: the pretraining loss did not fall to half: %r" % pre)
    print("vocabulary %d as the reference's WordTokenizer; pretraining loss %.3f -> %.3f in %d "
          "steps" % (vocab, pre[0][1], pre[-1][1], LM["pretrain_steps"]))
    got = train_losses(r1)
    with open(os.path.join(r1, "summary.json")) as f:
        summ = json.load(f)
    print("stage 2: %d epochs, loss %.4f -> %.4f; val_loss %.4f, shuffled_val_loss %.4f" % (
        len(got), got[0], got[-1], summ["val_loss"], summ["shuffled_val_loss"]))

    # ---- 2. the same through --config
    cfg = os.path.join(d, "lm.yaml")
    with open(cfg, "w") as f:
        f.write("lm:\n  path: null\n")
        for k, v in LM.items():
            f.write("  %s: %s\n" % (k, v))
    r2 = os.path.join(d, "run2")
    a = args(ctrain, r2)
    for k in LM:
        i = a.index("--lm_" + k)
        del a[i:i + 2]
    run(a + ["--config", cfg])
    if train_losses(r2) != got:
        raise SystemExit("FAIL: --config's lm.* keys gave other losses than the flags")
    print("lm.* from --config: the same losses bit for bit")

    # ---- 3. 2 ranks: rank 0's LM on both. The evaluation of the final weights splits the
    # validation curves over the ranks and adds their sums: the same as 1 rank's only if rank
    # 1 scores with rank 0's LM.
    final = os.path.join(r1, "final.safetensors")
    evals = []
    for cmd in ([], [ctrun, "--standalone", "--nproc_per_node", "2"]):
        r = os.path.join(d, "eval%d" % len(evals))
        p = run(cmd + args(ctrain, r) + ["--inference_only", "--state_dict_path", final])
        line = [x for x in p.stdout.splitlines() if x.startswith("# summary: ")]
        if not line:
            sys.stdout.write(p.stdout)
            raise SystemExit("FAIL: --inference_only printed no summary")
        o = json.loads(line[-1][len("# summary: "):])
        evals.append((o["val_loss"], o["shuffled_val_loss"]))
    worst = max(abs(x - y) for x, y in zip(*evals))
    if not worst < 1e-6 or abs(evals[0][0] - summ["val_loss"]) > 1e-6:
        raise SystemExit("FAIL: --inference_only on 1 and 2 ranks and the run: %r, %r" % (
            evals, summ["val_loss"]))
    print("--inference_only on 2 ranks under ctrun: val_loss and shuffled_val_loss within %.3g "
          "of 1 rank's" % worst)

    # ---- 4. a kill and a resume under ctrun
    r3 = os.path.join(d, "run3")
    p = run([ctrun, "--standalone", "--nproc_per_node", "1", "--max_restarts", "1",
             "--inject", "kill:rank=0:at=step=12"] + args(ctrain, r3), check=False)
    if p.returncode != 0 or "injected kill at step 12" not in p.stdout + p.stderr or \
            "# resumed from" not in p.stdout:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: the run was not killed and resumed")
    a = load_file(os.path.join(r1, "final.safetensors"))
    b = load_file(os.path.join(r3, "final.safetensors"))
    if sorted(a) != sorted(b):
        raise SystemExit("FAIL: the resumed run's tensors differ in name")
    for name in a:
        if not np.array_equal(a[name], b[name]):
            raise SystemExit("FAIL: %s differs after the kill and resume" % name)
    if train_losses(r3)[-5:] != got[-5:]:
        raise SystemExit("FAIL: the resumed run's last losses differ")
    print("kill at step 12 and resume under ctrun: final weights bit-identical")

    # ---- 5. bad sizes
    p = run(args(ctrain, os.path.join(d, "bad")) + ["--lm_num_heads", "3"], check=False)
    err = p.stderr.strip().splitlines()
    if p.returncode == 0 or not err or "--lm_num_heads 3" not in err[-1]:
        raise SystemExit("FAIL: --lm_num_heads 3 of width 16: exit %d, %r" % (
            p.returncode, p.stderr))
    print("heads that do not divide the width: %s" % err[-1])
    print("PASS")


if __name__ == "__main__":
    main()
