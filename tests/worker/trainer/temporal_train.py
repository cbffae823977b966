"""temporal_train.py - ctrain --model temporal against the PyTorch program
examples/pytorch/temporal_encoder_ddp.py (its TemporalModel, loss, AdamW, clipping and
warm-up + cosine schedule), run by test_temporal_train.c with the PyTorch 2.x interpreter:

    temporal_train.py CTRAIN CTRUN DIR

  1. a curve cache written by the reference's own temporal_curves.write_cache;
  2. the reference's initial stage-1 weights exported to safetensors under its state_dict names
     and given to ctrain as --state_dict_path;
  3. 20 optimizer steps of stage 1 (reconstruct) in both, dropout 0, float32, one step per epoch
     (the batch is the whole training set): every step's loss equal within 1e-4. PyTorch masks
     the patches ctrain masks (ctrain's rule, reproduced here: Philox4x32-10 draws, the k
     smallest of a curve's n draws);
  4. the same run on 2 ranks under ctrun (CPU ring) with 2 accumulated micro-batches of 8 curves
     per step: the same losses within 1e-4;
  4b. the summary's val_loss and baseline_val_loss against PyTorch's on the same masks, and
     --inference_only of the final weights giving the same numbers, and its embeddings of a CSV
     file of curves against the reference's encoder output (mean over the patches);
  5. a run under ctrun killed at step 12 (--inject) and restarted from its checkpoint: the
     resumed run ends with the uninterrupted run's final weights, bit for bit, and has every
     epoch's checkpoint under the guide's name (epoch_{e}_step_{s}.safetensors), each equal to
     the uninterrupted run's.

Exits 77 when torch, numpy, safetensors or yaml is missing (the C side skips).
"""
import json
import os
import subprocess
import sys

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    from safetensors.numpy import load_file
    from safetensors.torch import save_file
    import yaml  # noqa: F401 (the reference imports it)
except ImportError as e:
    print("skip: %s" % e)
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402
import temporal_encoder_ddp as ref  # noqa: E402
import ddp_common as dc  # noqa: E402

M32 = 0xFFFFFFFF
SEED = 7
N, S, VAL = 20, 32, 0.2
STEPS = 20
MODEL = {"patch_len": 4, "d_model": 16, "num_layers": 2, "num_heads": 2, "ff_dim": 24,
         "dropout": 0.0, "num_soft_tokens": 2, "mask_ratio": 0.4,
         "gradient_checkpointing": False}
LR, WD, WARMUP, CLIP = 3e-3, 0.01, 5, 1.0


def philox_block(seed, stream, block):
    c = [block & M32, block >> 32, stream & M32, (stream >> 32) & M32]
    k0, k1 = seed & M32, (seed >> 32) & M32
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
        p0 = 0xD2511F53 * c[0]
        p1 = 0xCD9E8D57 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k0, p1 & M32, (p0 >> 32) ^ c[3] ^ k1, p0 & M32]
    return c


def uniforms(seed, stream, offset, n):
    out = []
    for i in range(offset, offset + n):
        out.append((philox_block(seed, stream, i // 4)[i % 4] >> 8) / 16777216.0)
    return out


def ctrain_mask(seed, epoch, i, n, k):
    """ctrain's training mask of curve i in epoch (from 0): the k smallest of n draws."""
    u = uniforms(seed, (270 << 48) | epoch, i * n, n)
    order = sorted(range(n), key=lambda j: (u[j], j))
    m = [False] * n
    for j in order[:k]:
        m[j] = True
    return m


def ctrain_eval_mask(seed, i, n, k):
    """ctrain's evaluation mask of curve i: stream (271, 0)."""
    u = uniforms(seed, 271 << 48, i * n, n)
    order = sorted(range(n), key=lambda j: (u[j], j))
    m = [False] * n
    for j in order[:k]:
        m[j] = True
    return m


def run(cmd, env=None, check=True):
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if check and p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: %s exited %d" % (" ".join(cmd[:3]), p.returncode))
    return p


def train_losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["train_loss"] for line in f]


def ctrain_args(ctrain, cache, init, run_dir, epochs=STEPS, batch=16, accum=1):
    return [ctrain, "--model", "temporal", "--dataset", cache, "--state_dict_path", init,
            "--train_dir", run_dir, "--patch_len", str(MODEL["patch_len"]),
            "--hidden_units", str(MODEL["d_model"]), "--num_blocks", str(MODEL["num_layers"]),
            "--num_heads", str(MODEL["num_heads"]), "--ff_dim", str(MODEL["ff_dim"]),
            "--dropout_rate", "0", "--mask_ratio", str(MODEL["mask_ratio"]),
            "--val_fraction", str(VAL), "--batch_size", str(batch), "--grad_accum", str(accum),
            "--num_epochs", str(epochs),
            "--eval_every", "1", "--lr", repr(LR), "--weight_decay", repr(WD),
            "--warmup_steps", str(WARMUP), "--grad_clip", repr(CLIP), "--seed", str(SEED),
            "--num_workers", "0", "--ckpt_every_steps", "5"]


def main():
    ctrain, ctrun, d = sys.argv[1:4]
    cache = os.path.join(d, "cache")
    temporal_curves.write_cache(cache, 3, N, S, log=None)

    torch.manual_seed(0)
    model = ref.TemporalModel(MODEL, S, 32)
    ref.set_stage(model, "reconstruct")
    init = os.path.join(d, "init.safetensors")
    save_file({k: v.detach().clone().contiguous() for k, v in model.state_dict().items()
               if not k.startswith("projector.")}, init)

    # ---- PyTorch: 20 steps of the reference's stage 1 on ctrain's masks
    curves, _, _ = temporal_curves.read_cache(cache)
    n_val = max(1, int(N * VAL))
    n_train = N - n_val
    n = S // MODEL["patch_len"]
    k = max(1, int(round(MODEL["mask_ratio"] * n)))
    x = torch.from_numpy(np.array(curves[:n_train]))
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=LR, weight_decay=WD)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, dc.warmup_cosine(WARMUP, STEPS))
    model.train()
    want = []
    for step in range(STEPS):
        mask = torch.tensor([ctrain_mask(SEED, step, i, n, k) for i in range(n_train)])
        pred, target = model(x, mask)
        loss = F.mse_loss(pred.float()[mask], target[mask])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, CLIP)
        opt.step()
        sched.step()
        want.append(loss.item())

    # ---- ctrain, 1 rank
    r1 = os.path.join(d, "run1")
    run(ctrain_args(ctrain, cache, init, r1))
    got = train_losses(r1)
    worst = max(abs(a - b) for a, b in zip(got, want))
    print("stage 1, 1 rank: %d steps, max |loss ctrain - loss torch| = %.3g" % (len(got), worst))
    for s, (a, b) in enumerate(zip(got, want)):
        print("  step %2d  ctrain %.7f  torch %.7f" % (s + 1, a, b))
    if len(got) != STEPS or not worst < 1e-4:
        raise SystemExit("FAIL: losses differ")
    final = load_file(os.path.join(r1, "final.safetensors"))
    for name, p in model.state_dict().items():
        if name.startswith("projector."):
            continue
        got_w, want_w = final[name], p.detach().numpy()
        if name.endswith("in_proj_bias"):
            # The key bias gets a zero gradient in exact arithmetic (softmax ignores a constant
            # added to every score of a row), so Adam normalises rounding noise into full steps
            # in both programs: only its query and value parts are compared.
            c = got_w.shape[0] // 3
            got_w = np.concatenate([got_w[:c], got_w[2 * c:]])
            want_w = np.concatenate([want_w[:c], want_w[2 * c:]])
        diff = float(np.abs(got_w - want_w).max())
        if not diff < 1e-4:
            raise SystemExit("FAIL: %s differs from PyTorch's by %.3g after %d steps" % (
                name, diff, STEPS))
    print("stage 1, 1 rank: final weights within 1e-4 of PyTorch's")

    # ---- the evaluation: val_loss and baseline_val_loss of the summary against PyTorch's
    # computation with the final weights on ctrain's evaluation masks (stream (271, 0))
    with open(os.path.join(r1, "summary.json")) as f:
        summ = json.load(f)
    model.eval()
    xv = torch.from_numpy(np.array(curves[n_train:]))
    vmask = torch.tensor([[m for m in ctrain_eval_mask(SEED, n_train + i, n, k)]
                          for i in range(n_val)])
    with torch.no_grad():
        pred, target = model(xv, vmask)
        v_want = F.mse_loss(pred[vmask], target[vmask]).item()
        vis = (~vmask).unsqueeze(-1).float()
        mean = (target * vis).sum(1, keepdim=True) / vis.sum(1, keepdim=True)
        b_want = ((mean.expand_as(target) - target)[vmask] ** 2).mean().item()
    print("val_loss ctrain %.7f torch %.7f; baseline_val_loss ctrain %.7f torch %.7f" % (
        summ["val_loss"], v_want, summ["baseline_val_loss"], b_want))
    if not (abs(summ["val_loss"] - v_want) < 1e-4 and abs(summ["baseline_val_loss"] - b_want) <
            1e-5):
        raise SystemExit("FAIL: the evaluation differs from PyTorch's")
    p = run([ctrain] + ctrain_args(ctrain, cache, os.path.join(r1, "final.safetensors"),
                                   os.path.join(d, "infer"))[1:] + ["--inference_only"])
    inf = json.loads(p.stdout.split("# summary: ")[1].splitlines()[0])
    if inf["val_loss"] != summ["val_loss"] or inf["baseline_val_loss"] != summ["baseline_val_loss"]:
        raise SystemExit("FAIL: --inference_only gives %r, training's last evaluation %r" % (
            inf, summ))
    print("--inference_only of final.safetensors: the same val_loss and baseline_val_loss")

    # ---- embeddings of real curves from a CSV file (one series per row) against PyTorch's
    # encoder output, mean over the patches, with ctrain's final weights loaded into it
    real = (np.sin(np.arange(S) / 3.0)[None, :] * np.arange(1, 6)[:, None] +
            np.cos(np.arange(S))[None, :]).astype(np.float32)
    csv = os.path.join(d, "real.csv")
    with open(csv, "w") as f:
        for row in real:
            f.write(",".join(repr(float(v)) for v in row) + "\n")
    emb_dir = os.path.join(d, "emb")
    run([ctrain] + ctrain_args(ctrain, csv, os.path.join(r1, "final.safetensors"),
                               emb_dir)[1:] + ["--inference_only"])
    got_e = np.load(os.path.join(emb_dir, "embeddings.npy"))
    fresh = ref.TemporalModel(MODEL, S, 32)
    fresh.load_state_dict({k: torch.from_numpy(v) for k, v in final.items()
                           if not k.startswith("optimizer.")}, strict=False)
    fresh.eval()
    with torch.no_grad():
        want_e = fresh.encode(fresh.patches(torch.from_numpy(real))).mean(1).numpy()
    diff = float(np.abs(got_e - want_e).max()) if got_e.shape == want_e.shape else float("inf")
    print("embeddings of %d CSV curves: shape %s, max |ctrain - torch| = %.3g" % (
        len(real), got_e.shape, diff))
    if not diff < 1e-5:
        raise SystemExit("FAIL: the embeddings differ from PyTorch's")
    bad = os.path.join(d, "bad.csv")
    with open(bad, "w") as f:
        f.write(",".join(["1.0"] * S) + "\n" + ",".join(["1.0"] * (S - 1)) + "\n")
    p = run([ctrain] + ctrain_args(ctrain, bad, os.path.join(r1, "final.safetensors"),
                                   os.path.join(d, "emb_bad"))[1:] + ["--inference_only"],
            check=False)
    if p.returncode == 0 or "bad.csv:2: %d points" % (S - 1) not in p.stderr or \
            os.path.exists(os.path.join(d, "emb_bad", "embeddings.npy")):
        raise SystemExit("FAIL: a short CSV row: exit %d, %r" % (p.returncode, p.stderr))

    # ---- ctrain, 2 ranks under ctrun (the CPU ring), 2 micro-batches of 8 curves per step
    r2 = os.path.join(d, "run2")
    run([ctrun, "--standalone", "--nproc_per_node", "2", "--max_restarts", "0"] +
        ctrain_args(ctrain, cache, init, r2, batch=8, accum=2))
    got2 = train_losses(r2)
    worst2 = max(abs(a - b) for a, b in zip(got2, want))
    print("stage 1, 2 ranks x 2 accumulated micro-batches: max |loss ctrain - loss torch| = %.3g"
          % worst2)
    if len(got2) != STEPS or not worst2 < 1e-4:
        raise SystemExit("FAIL: 2-rank losses differ")

    # ---- a kill and a resume under ctrun: the same final weights as the uninterrupted run
    r3 = os.path.join(d, "run3")
    p = run([ctrun, "--standalone", "--nproc_per_node", "1", "--max_restarts", "1",
             "--inject", "kill:rank=0:at=step=12"] + ctrain_args(ctrain, cache, init, r3),
            check=False)
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: the killed run did not finish after its restart")
    if "injected kill at step 12" not in p.stdout + p.stderr or "# resumed from" not in p.stdout:
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        raise SystemExit("FAIL: the run was not killed and resumed")
    a = load_file(os.path.join(r1, "final.safetensors"))
    b = load_file(os.path.join(r3, "final.safetensors"))
    for name in a:
        if not np.array_equal(a[name], b[name]):
            raise SystemExit("FAIL: %s differs after the kill and resume" % name)
    print("kill at step 12 and resume under ctrun: final weights bit-identical")
    # the guide's epoch checkpoints (one step per epoch here): every epoch's, in both runs, the
    # same tensors, the last one final.safetensors
    for e in range(1, STEPS + 1):
        name = "epoch_%d_step_%d.safetensors" % (e, e)
        if not all(os.path.isfile(os.path.join(r, name)) for r in (r1, r3)):
            raise SystemExit("FAIL: %s missing after the run (or after the kill and resume): %s"
                             % (name, sorted(os.listdir(r3))))
        x, y = load_file(os.path.join(r1, name)), load_file(os.path.join(r3, name))
        if sorted(x) != sorted(y) or not all(np.array_equal(x[k], y[k]) for k in x):
            raise SystemExit("FAIL: %s differs after the kill and resume" % name)
    last = load_file(os.path.join(r3, "epoch_%d_step_%d.safetensors" % (STEPS, STEPS)))
    if not all(np.array_equal(last[k], b[k]) for k in b):
        raise SystemExit("FAIL: the last epoch's checkpoint is not final.safetensors")
    print("epoch_{e}_step_{s}.safetensors of all %d epochs: bit-identical after the kill" % STEPS)
    print("PASS")


if __name__ == "__main__":
    main()
