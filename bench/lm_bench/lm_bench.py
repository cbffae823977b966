#!/usr/bin/env python3
"""lm_bench.py - ctrain's GPT-2 / Qwen2 forward+backward against PyTorch's, in one run.

For each model size (GPT-2-small: 124M parameters; Qwen2.5-0.5B: 494M), random weights are
created with transformers and saved with save_pretrained into a temporary folder (removed at the
end), one batch of token ids is drawn and written next to them, and then both sides run the same
optimizer-free step on the same batch: zero the gradients, forward with the next-token loss,
backward. ctrain's side is build/bench/lm_bench (a C program on ctrain_lm); PyTorch's is this
script in a child process (transformers' model in float32, train mode with every dropout at 0,
eager; with --compile on a GPU also torch.compile). Each side runs in its own process so that its
peak resident memory (wait4's ru_maxrss) is its own.

Ranks: "1 rank" is one process with --threads threads (2 on the 2-core machine); "2 ranks" is two
processes started together, each with one thread and half of the batch's rows, and the tokens per
second are the whole batch's tokens over the slower rank's step time. The gradient all-reduce a
data-parallel step adds is not in these figures (bench/allreduce_bench measures it).

Prints a table: per model, side and rank count, the median step time over the measured steps of
the median repetition, tokens per second and peak RSS (MiB), and ctrain's over PyTorch's speed.

  lm_bench.py --lm-bench build/bench/lm_bench [--models gpt2,qwen2] [--batch 2] [--seq 256]
              [--steps 3] [--warmup 1] [--ranks 1,2] [--threads 2] [--repeat 3]
              [--device cpu|cuda] [--compile] [--recompute] [--json FILE]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def model_config(name):
    """The transformers config of a model size, dropout off."""
    import transformers

    if name == "gpt2":
        return transformers.GPT2Config(
            vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0)
    if name == "qwen2":
        return transformers.Qwen2Config(
            vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
            num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768,
            rope_theta=1000000.0, rms_norm_eps=1e-6, tie_word_embeddings=True,
            attention_dropout=0.0, hidden_act="silu")
    raise SystemExit(f"lm_bench.py: unknown model {name!r} (gpt2, qwen2)")


def make_model(name, folder, rows, seq, seed):
    """Random weights saved into folder, and rows x seq int32 token ids in folder/ids.bin."""
    import numpy as np
    import torch
    import transformers

    torch.manual_seed(seed)
    cfg = model_config(name)
    cls = transformers.GPT2LMHeadModel if name == "gpt2" else transformers.Qwen2ForCausalLM
    model = cls(cfg)
    model.save_pretrained(folder, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    del model
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(rows, seq), dtype=np.int32)
    ids.tofile(os.path.join(folder, "ids.bin"))
    return n


def torch_worker(a):
    """The PyTorch side in this (child) process: one JSON line like lm_bench's."""
    import numpy as np
    import torch
    import transformers

    torch.set_num_threads(a.threads)
    dev = torch.device(a.device)
    t0 = time.perf_counter()
    cls = transformers.AutoModelForCausalLM
    model = cls.from_pretrained(a.dir, torch_dtype=torch.float32).to(dev)
    model.train()
    if a.recompute:
        model.gradient_checkpointing_enable()
    step_model = torch.compile(model) if a.compile else model
    load_s = time.perf_counter() - t0
    allids = np.fromfile(os.path.join(a.dir, "ids.bin"), dtype=np.int32)
    allids = allids.reshape(-1, a.seq)[a.row0:a.row0 + a.batch]
    ids = torch.from_numpy(allids.astype(np.int64)).to(dev)
    times, loss = [], None
    for s in range(a.warmup + a.steps):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.zero_grad(set_to_none=False)
        out = step_model(input_ids=ids, labels=ids)
        out.loss.backward()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        loss = float(out.loss)
        if s >= a.warmup:
            times.append(dt)
    res = {"impl": "torch.compile" if a.compile else "pytorch", "device": a.device,
           "threads": a.threads, "B": a.batch, "L": a.seq, "recompute": a.recompute,
           "load_s": load_s, "num_params": sum(p.numel() for p in model.parameters()),
           "attn": getattr(model.config, "_attn_implementation", "?"), "step_s": times,
           "loss": loss}
    if dev.type == "cuda":
        res["gpu_peak_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(res), flush=True)


def run_ranks(cmds):
    """Starts every command at once; waits for all. [(json result, peak RSS bytes)] or exits."""
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for c in cmds]
    out = []
    for p, c in zip(procs, cmds):
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        stdout, stderr = p.stdout.read(), p.stderr.read()
        p.stdout.close()
        p.stderr.close()
        if p.returncode != 0:
            for q in procs:
                if q.poll() is None:
                    q.kill()
                    q.wait()
            sys.exit(f"lm_bench.py: {' '.join(c)} exited {p.returncode}:\n{stderr.strip()}")
        line = [ln for ln in stdout.splitlines() if ln.startswith("{")][-1]
        out.append((json.loads(line), ru.ru_maxrss * 1024))
    return out


def side_cmds(a, impl, folder, ranks):
    """The commands of one side with ranks processes (rows split evenly)."""
    rows = a.batch // ranks
    threads = a.threads if ranks == 1 else 1
    cmds = []
    for r in range(ranks):
        common = ["--batch", str(rows), "--seq", str(a.seq), "--row0", str(r * rows),
                  "--steps", str(a.steps), "--warmup", str(a.warmup),
                  "--threads", str(threads), "--device", a.device]
        if a.recompute:
            common.append("--recompute")
        if impl == "ctrain":
            cmds.append([a.lm_bench, "--lm_dir", folder, "--ids",
                         os.path.join(folder, "ids.bin")] + common)
        else:
            cmds.append([sys.executable, os.path.abspath(__file__), "--worker", "--dir", folder]
                        + common + (["--compile"] if impl == "torch.compile" else []))
    return cmds


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lm-bench", dest="lm_bench", default="build/bench/lm_bench")
    ap.add_argument("--models", default="gpt2,qwen2")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--ranks", default="1,2")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--compile", action="store_true", help="also torch.compile (GPU runs)")
    ap.add_argument("--recompute", action="store_true",
                    help="activation recomputation on both sides")
    ap.add_argument("--json", help="also write every result here")
    ap.add_argument("--seed", type=int, default=1234)
    # the PyTorch child
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    ap.add_argument("--row0", type=int, default=0, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        torch_worker(a)
        return
    ranks = [int(r) for r in a.ranks.split(",")]
    if a.device == "cuda":
        ranks = [1]  # one GPU
    for r in ranks:
        if a.batch % r != 0:
            sys.exit(f"lm_bench.py: --batch {a.batch} does not split over {r} ranks")
    if not os.access(a.lm_bench, os.X_OK):
        sys.exit(f"lm_bench.py: --lm-bench {a.lm_bench}: not an executable (build it: ninja -C "
                 "build bench/lm_bench)")
    impls = ["ctrain", "pytorch"] + (["torch.compile"] if a.compile else [])
    results = []
    print(f"# lm_bench {time.strftime('%Y-%m-%d %H:%M:%S %Z')} device={a.device} B={a.batch} "
          f"L={a.seq} steps={a.steps} (+{a.warmup} warm-up) repeat={a.repeat} "
          f"threads(1 rank)={a.threads} recompute={a.recompute}")
    print(f"# load: {os.getloadavg()}")
    print(f"# {'model':6} {'side':13} {'ranks':>5} {'step s':>8} {'tok/s':>9} "
          f"{'peak RSS MiB':>13} {'reps (tok/s)':>24}")
    for name in a.models.split(","):
        tmp = tempfile.mkdtemp(prefix="lm_bench_")
        try:
            nparams = make_model(name, tmp, a.batch, a.seq, a.seed)
            print(f"# {name}: {nparams / 1e6:.1f}M parameters", flush=True)
            for nr in ranks:
                reps = {impl: [] for impl in impls}
                for _ in range(a.repeat):
                    for impl in impls:  # interleaved, one side at a time
                        out = run_ranks(side_cmds(a, impl, tmp, nr))
                        step = max(statistics.median(res["step_s"]) for res, _ in out)
                        rss = max(m for _, m in out)
                        reps[impl].append((step, rss, [res for res, _ in out]))
                speed = {}
                for impl in impls:
                    runs = sorted(reps[impl], key=lambda t: t[0])
                    step, rss, res = runs[len(runs) // 2]
                    tok = a.batch * a.seq / step
                    speed[impl] = tok
                    allrep = ", ".join(f"{a.batch * a.seq / s:.0f}" for s, _, _ in reps[impl])
                    print(f"  {name:6} {impl:13} {nr:5d} {step:8.3f} {tok:9.1f} "
                          f"{rss / 2**20:13.0f} {allrep:>24}  loss {res[0]['loss']:.4f}"
                          + (f" act {res[0]['act_bytes'] / 2**20:.0f} MiB"
                             if "act_bytes" in res[0] else "")
                          + (f" gpu {res[0]['gpu_peak_bytes'] / 2**20:.0f} MiB"
                             if "gpu_peak_bytes" in res[0] else ""), flush=True)
                    results.append({"model": name, "impl": impl, "ranks": nr, "step_s": step,
                                    "tok_s": tok, "peak_rss": rss,
                                    "runs": [r for _, _, r in reps[impl]]})
                for impl in impls[1:]:
                    print(f"  {name:6} ctrain/{impl}: {speed['ctrain'] / speed[impl]:.2f}x "
                          f"({nr} rank{'s' if nr > 1 else ''})")
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"# load after: {os.getloadavg()}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
