#!/usr/bin/env python3
"""step_bench.py - ctrain's training step on a GPU against the PyTorch reference
(tests/worker/trainer/torch_ref.py) on the same GPU, same data and hyper-parameters, with the roofline
estimate of docs/models.md §6. Run by bench/gpu/run.sh; works without a network.

    step_bench.py --ctrain build-gpu/worker/ctrain [--device cuda] [--steps N] [--reps R]
                  [--workload sasrec-ml1m|tisasrec-ml100k|sasrec-mhc-ml1m|all] [--out DIR]

Workloads (the references' defaults, as bench/train_bench):
  sasrec-ml1m      SASRec (post_ln) on ml-1m-r, L = 200, B = 128, d = 50, 2 blocks, 1 head,
                   dropout 0.2, BCE; ctrain --no_time --no_mhc
  tisasrec-ml100k  TiSASRec on ml-100k, L = 50, B = 128, d = 50, 2 blocks, 1 head, dropout 0.2,
                   time_span 256, l2_emb 5e-5; ctrain --no_mhc
  sasrec-mhc-ml1m  the first with mHC residual streams (ctrain's default mHC settings, pre-LN
                   as mHC requires); ctrain only: the repository has no PyTorch program of it
Data: the dataset files under $CT_DATA_DIR (ml-1m-r/ml-1m-r.txt, ml-100k/u.data; see
docs/CONTRIBUTING.md, "Datasets"); when CT_DATA_DIR is unset or the file is not there, a
synthetic file of the same size (users, items, interactions; random sequences, increasing times)
is written under --out and both programs read it, so the comparison stays like for like (the
"data" column says which).

ms/step: ctrain's steady state, from its summaries (train_seconds, steps; evaluation and
checkpoints excluded) of a 1-epoch and an 11-epoch run: the difference of the times over the
difference of the steps, so the one-time set-up is left out (the 1-epoch figure, set-up
included, is kept in step_bench.json as *_first_epoch); fp32 and with --use_amp; "ctrain MiB"
is the device memory ctrain's CUDA backend held at its peak (its summary's device_peak_bytes:
parameters, optimizer state, activations, scratch and the cuBLAS workspace; the CUDA context is
not counted, as PyTorch's peak figure does not count it either); PyTorch's epoch event (train_seconds / steps,
after 3 untimed warm-up steps), eager and under torch.compile in each mode of --compile (8 untimed
warm-up steps, in which the compilation happens; their seconds and the timed steps' peak GPU
memory are printed). Each is run --reps times and the median taken. The roofline
column: SASRec 11.2 GFLOP per step (8.0 with causal skipping) and ~0.3-0.6 GB moved, so
0.2-0.3 ms on an H100 (docs/models.md §6.4); TiSASRec at L = 50, 2.1 GFLOP (§6.3): ~0.03 ms of fp32
compute, memory-bound in practice.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import shutil
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))
TORCH_REF = os.path.join(TOP, "tests", "worker", "trainer", "torch_ref.py")
EPOCHS_LONG = 11  # ctrain runs of 1 and of EPOCHS_LONG epochs; ms/step from their difference


def data_dir():
    """$CT_DATA_DIR, the one place the real datasets are looked for; None when unset."""
    return os.environ.get("CT_DATA_DIR") or None


WORKLOADS = {
    "sasrec-ml1m": {
        "file": ("ml-1m-r", "ml-1m-r.txt"),
        "size": (6040, 3416, 999611),
        "timed": False,
        "ctrain": ["--no_time", "--no_mhc", "--maxlen", "200", "--batch_size", "128",
                   "--hidden_units", "50", "--num_blocks", "2", "--num_heads", "1",
                   "--dropout_rate", "0.2", "--layout", "post_ln", "--l2_emb", "0"],
        "torch": ["--model", "sasrec", "--maxlen", "200", "--batch_size", "128", "--l2_emb", "0"],
        "roofline": "0.2-0.3 (11.2 GFLOP, ~0.4 GB)",
    },
    "tisasrec-ml100k": {
        "file": ("ml-100k", "u.data"),
        "size": (943, 1682, 100000),
        "timed": True,
        "ctrain": ["--no_mhc", "--maxlen", "50", "--batch_size", "128", "--hidden_units", "50",
                   "--num_blocks", "2", "--num_heads", "1", "--dropout_rate", "0.2",
                   "--time_span", "256", "--l2_emb", "5e-5"],
        "torch": ["--model", "tisasrec", "--maxlen", "50", "--batch_size", "128",
                  "--time_span", "256", "--l2_emb", "5e-5"],
        "roofline": ">= 0.03 (2.1 GFLOP; memory-bound)",
    },
    "sasrec-mhc-ml1m": {
        "file": ("ml-1m-r", "ml-1m-r.txt"),
        "size": (6040, 3416, 999611),
        "timed": False,
        "ctrain": ["--no_time", "--mhc", "true", "--maxlen", "200", "--batch_size", "128",
                   "--hidden_units", "50", "--num_blocks", "2", "--num_heads", "1",
                   "--dropout_rate", "0.2", "--l2_emb", "0"],
        "torch": None,  # no PyTorch program of the mHC variant in the repository
        "roofline": "-",
    },
}


def synthetic(path, users, items, interactions, timed, seed=7):
    """A file of the dataset's size: 'user item' lines in order (SASRec), or tab-separated
    'user item rating time' (TiSASRec's u.data layout), every user at least 5 interactions."""
    rng = random.Random(seed)
    per = max(interactions // users, 5)
    with open(path, "w") as f:
        for u in range(1, users + 1):
            n = max(5, int(rng.expovariate(1.0 / per)) + 5)
            t = 880000000 + rng.randrange(10 ** 6)
            for _ in range(n):
                i = 1 + min(int(rng.paretovariate(1.1)) - 1, items - 1) if rng.random() < 0.5 \
                    else rng.randrange(1, items + 1)
                t += rng.randrange(1, 86400 * 3)
                if timed:
                    f.write(f"{u}\t{i}\t5\t{t}\n")
                else:
                    f.write(f"{u} {i}\n")
    return path


def dataset(name, w, out):
    d = data_dir()
    p = os.path.join(d, *w["file"]) if d else None
    if p and os.path.isfile(p):
        return p, "file"
    print("step_bench: %s: %s, using a synthetic file of the same size"
          % (name, "%s not found" % p if p else "CT_DATA_DIR is not set"), file=sys.stderr)
    users, items, inter = w["size"]
    s = os.path.join(out, f"synthetic-{name}.txt")
    if not os.path.isfile(s):
        synthetic(s, users, items, inter, w["timed"])
    return s, "synthetic (same size)"


CTRAIN_PEAK = {}  # tag -> the largest device_peak_bytes of ctrain's summaries (CUDA backend)


def ctrain_run(ctrain, data, w, device, amp, out, tag, epochs):
    """(train_seconds, steps) of one ctrain run of `epochs` epochs (evaluation excluded)."""
    d = tempfile.mkdtemp(prefix=f"ctrain-{tag}-e{epochs}-", dir=out)
    cmd = [ctrain, "--dataset", data, "--train_dir", d, "--num_epochs", str(epochs),
           "--eval", "sampled", "--eval_every", "0", "--resume", "never",
           "--ckpt_every_steps", "0", "--device", device] + w["ctrain"] + \
        (["--use_amp"] if amp else [])
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    with open(os.path.join(out, f"ctrain-{tag}-e{epochs}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    shutil.rmtree(d, ignore_errors=True)  # checkpoints: megabytes per run
    if r.returncode != 0:
        raise RuntimeError(f"ctrain exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    for line in r.stdout.splitlines():
        if line.startswith("# summary: "):
            s = json.loads(line[len("# summary: "):])
            if s.get("device_peak_bytes"):
                CTRAIN_PEAK[tag] = max(CTRAIN_PEAK.get(tag, 0), s["device_peak_bytes"])
            return s["train_seconds"], s["steps"]
    raise RuntimeError("ctrain printed no summary")


def ctrain_ms(ctrain, data, w, device, amp, out, tag):
    """Steady-state ms per step: a run of EPOCHS_LONG epochs minus a run of 1, per step of the
    difference, so that the process's one-time set-up (CUDA context, module loading, cuBLAS
    handles, the first step's allocations) is not spread over the steps, as PyTorch's warm-up
    steps are not. Also returns the 1-epoch run's ms/step (set-up included) as the second value."""
    t1, s1 = ctrain_run(ctrain, data, w, device, amp, out, tag, 1)
    t2, s2 = ctrain_run(ctrain, data, w, device, amp, out, tag, EPOCHS_LONG)
    return 1000.0 * (t2 - t1) / max(s2 - s1, 1), 1000.0 * t1 / max(s1, 1)


TORCH_STATS = {}  # tag -> {"peak_bytes", "warmup_seconds"} of each PyTorch run


def torch_ms(python, data, w, device, steps, out, tag, compile_mode="none", limit=None):
    """Mean ms per step of the PyTorch reference, eager or torch.compile'd (compiled during
    the warm-up steps, which are not timed; their seconds are kept in TORCH_STATS). A run
    longer than limit seconds is stopped and reported as not finished."""
    warmup = "3" if compile_mode == "none" else "8"
    cmd = [python, TORCH_REF, "train", "--dataset", data, "--device", device, "--warmup", warmup,
           "--epochs", "1", "--max_steps", str(steps), "--compile", compile_mode] + w["torch"]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=limit)
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"did not finish within {limit:.0f} s (--compile_limit)")
    with open(os.path.join(out, f"torch-{tag}.log"), "w") as f:
        f.write(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    if r.returncode != 0:
        raise RuntimeError(f"torch_ref exited {r.returncode}: {r.stderr.strip().splitlines()[-1:]}")
    stats = TORCH_STATS.setdefault(tag, {})
    for line in r.stdout.splitlines():
        e = json.loads(line)
        if e.get("event") == "warmup":
            stats["warmup_seconds"] = e["seconds"]
        if e.get("event") == "epoch":
            stats["peak_bytes"] = e.get("peak_bytes")
            stats["wait_ms"] = 1000.0 * e["sample_wait_seconds"] / max(e["steps"], 1)
            return 1000.0 * e["train_seconds"] / max(e["steps"], 1)
    raise RuntimeError("torch_ref printed no epoch")


def median(f, reps):
    """Median of f(k) over reps calls, all values, and (for ctrain's (steady, first epoch)
    pairs) the first-epoch values."""
    xs, firsts = [], []
    for k in range(reps):
        v = f(k)
        if isinstance(v, tuple):
            v, first = v
            firsts.append(first)
        xs.append(v)
    return statistics.median(xs), xs, firsts


def main(argv):
    ap = argparse.ArgumentParser(prog="step_bench.py")
    ap.add_argument("--ctrain", default=os.path.join(TOP, "build-gpu", "worker", "ctrain"))
    ap.add_argument("--python", default=sys.executable, help="the Python with PyTorch")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=40, help="PyTorch steps timed")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--compile", default="default,reduce-overhead,max-autotune",
                    help="torch.compile modes timed besides eager, comma-separated ('' for "
                    "none); timed after the eager rows")
    ap.add_argument("--compile_reps", type=int, default=1,
                    help="runs of each torch.compile mode (median; each compiles anew)")
    ap.add_argument("--compile_limit", type=float, default=None,
                    help="seconds one torch.compile run may take (compilation included) before "
                    "it is stopped and its row says so; default: no limit")
    ap.add_argument("--workload", default="all", choices=["all"] + list(WORKLOADS))
    ap.add_argument("--out", default=tempfile.gettempdir())
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    names = list(WORKLOADS) if a.workload == "all" else [a.workload]
    modes = [m for m in a.compile.split(",") if m]
    for m in modes:
        if m not in ("default", "reduce-overhead", "max-autotune"):
            ap.error(f"--compile: unknown mode '{m}' (default, reduce-overhead, max-autotune)")
    rows = []
    for name in names:
        w = WORKLOADS[name]
        data, kind = dataset(name, w, a.out)
        row = {"workload": name, "data": kind}
        measure(row, [
            ("ctrain", lambda k: ctrain_ms(a.ctrain, data, w, a.device, False, a.out,
                                           f"{name}-fp32-{k}")),
            ("ctrain_amp", lambda k: ctrain_ms(a.ctrain, data, w, a.device, True, a.out,
                                               f"{name}-amp-{k}")),
        ] + ([("torch", lambda k: torch_ms(a.python, data, w, a.device, a.steps, a.out,
                                           f"{name}-{k}"))] if w["torch"] else []),
            a.reps, a.device)
        rows.append(row)
        report(rows, [], a.out)
    # torch.compile last: its compilations take the longest, and the rows above are already
    # reported when a caller's time limit cuts them short
    for mode in modes:
        for row in rows:
            name = row["workload"]
            w = WORKLOADS[name]
            if not w["torch"]:
                continue
            data, _ = dataset(name, w, a.out)
            measure(row, [("torch_" + mode, lambda k, m=mode: torch_ms(
                a.python, data, w, a.device, a.steps, a.out, f"{name}-{m}-{k}", m,
                a.compile_limit))], a.compile_reps, a.device)
            report(rows, modes, a.out)
    return 0


def measure(row, runs, reps, device):
    """Runs each (key, f) reps times into row: the median, all values, ctrain's first-epoch
    figure, PyTorch's peak memory and warm-up seconds; an error is kept as key_error."""
    for key, f in runs:
        if key == "ctrain_amp" and device == "cpu":
            continue
        try:
            row[key], row[key + "_all"], firsts = median(f, reps)
            if firsts:
                row[key + "_first_epoch"] = statistics.median(firsts)
        except (RuntimeError, OSError) as e:
            row[key + "_error"] = str(e)
        if key.startswith("ctrain"):
            pk = [v for t, v in CTRAIN_PEAK.items()
                  if t.startswith(f"{row['workload']}-{'amp' if key == 'ctrain_amp' else 'fp32'}-")]
            if pk:
                row[key + "_peak_mb"] = max(pk) / 2**20
        tag = key[len("torch_"):] + "-" if key.startswith("torch_") else ""
        st = [TORCH_STATS.get(f"{row['workload']}-{tag}{k}", {}) for k in range(reps)]
        if key.startswith("torch") and any(st):
            row[key + "_peak_mb"] = max((x.get("peak_bytes") or 0) for x in st) / 2**20
            row[key + "_warmup_s"] = statistics.median(x.get("warmup_seconds", 0) for x in st)
            row[key + "_wait_ms"] = statistics.median(x.get("wait_ms", 0) for x in st)


def report(rows, modes, out):
    """Prints the tables of the rows so far and rewrites step_bench.json."""
    cell = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
    ratio = lambda x, y: f"{x / y:.1f}x" if x and y else "-"  # noqa: E731
    mib = lambda v: f"{v:.0f}" if v else "-"  # noqa: E731
    fmt = "{:<17} {:>12} {:>12} {:>12} {:>9} {:>9} {:>11}  {}"
    print(fmt.format("workload", "ctrain ms", "ctrain amp", "torch ms", "speedup", "amp x",
                     "ctrain MiB", "roofline ms (H100)"))
    for r in rows:
        c, ca, t = r.get("ctrain"), r.get("ctrain_amp"), r.get("torch")
        print(fmt.format(r["workload"], cell(c), cell(ca), cell(t), ratio(t, c), ratio(t, ca),
                         mib(r.get("ctrain_peak_mb")), WORKLOADS[r["workload"]]["roofline"]))
        print(f"  data: {r['data']}" + "".join(
            f"; {k}: {v}" for k, v in r.items() if k.endswith("_error")))
    # PyTorch eager and each torch.compile mode against ctrain (fp32 and amp): ms per step; the
    # same less the time the step waited for the reference's Python sampler (the GPU's part,
    # which the ratios use: the figure most favourable to PyTorch); peak GPU memory of the timed
    # steps; the warm-up (compilation) seconds
    print()
    fmt2 = "{:<17} {:<26} {:>8} {:>10} {:>9} {:>12} {:>9} {:>10}"
    print(fmt2.format("workload", "PyTorch", "ms/step", "w/o wait", "ctrain x", "ctrain amp x",
                      "peak MiB", "warm-up s"))
    for r in rows:
        if not WORKLOADS[r["workload"]]["torch"]:
            continue
        for mode in ["eager"] + modes:
            key = "torch" if mode == "eager" else "torch_" + mode
            v = r.get(key)
            g = v - r.get(key + "_wait_ms", 0.0) if v is not None else None
            pk, wu = r.get(key + "_peak_mb"), r.get(key + "_warmup_s")
            print(fmt2.format(r["workload"], mode if mode == "eager" else f"compile {mode}",
                              cell(v), cell(g), ratio(g, r.get("ctrain")),
                              ratio(g, r.get("ctrain_amp")), f"{pk:.0f}" if pk else "-",
                              f"{wu:.1f}" if wu else "-"))
    with open(os.path.join(out, "step_bench.json"), "w") as f:
        json.dump(rows, f, indent=1)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
