#!/usr/bin/env python3
"""compare.py - joins kernels_bench_gpu's table with torch_ops.py's (same op names, same order)
and prints one table with the PyTorch / ctrun ratio per op, then the step lines: ctrun's ops as
one CUDA graph against the PyTorch reference model's step and the roofline
estimate of docs/models.md §6.4 (0.2-0.3 ms per step at ml-1m sizes).

    python3 bench/gpu/compare.py kernels_bench_gpu.txt torch_ops.txt

Either file may be missing or empty (that side is then shown as '-'). Used by bench/gpu/run.sh.
"""
import sys


def rows(path):
    """{(op, dir, k): ms} for the k-th row of (op, dir) in a bench table; '#' lines skipped."""
    out, seen = {}, {}
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError:
        return out
    for line in lines:
        if not line.startswith("  ") or len(line) < 36:
            continue
        op, direction = line[2:24].strip(), line[25:29].strip()
        if not direction:
            continue  # a totals line, not an op row
        fields = line[29:].split()
        try:
            ms = float(fields[0])
        except (IndexError, ValueError):
            continue
        k = seen.get((op, direction), 0)
        seen[(op, direction)] = k + 1
        out[(op, direction, k)] = ms
    return out


# Rows of kernels_bench_gpu that time the same PyTorch computation as another row: the same op
# at the same sizes (a second dropout site, the second FFN linear, the final LayerNorm).
ALIASES = {"ffn conv2": "ffn conv1", "final layernorm": "layernorm"}


def torch_ms(pt, key):
    """PyTorch's time for a kernels_bench_gpu row: the same row, else the op's first row, else
    the first row of the op it aliases."""
    op, direction, _ = key
    for k in (key, (op, direction, 0), (ALIASES.get(op, op), direction, 0)):
        if k in pt:
            return pt[k]
    return None


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: compare.py kernels_bench_gpu.txt torch_ops.txt")
    ct, pt = rows(sys.argv[1]), rows(sys.argv[2])
    keys = list(ct) + [k for k in pt if k not in ct]
    print(f"# {'op':<22} {'dir':<4} {'ctrun ms':>10} {'torch ms':>10} {'torch/ctrun':>12}")
    for key in keys:
        op, direction, k = key
        if op.startswith("step"):
            continue
        a, b = ct.get(key), torch_ms(pt, key)
        fa = f"{a:10.4f}" if a is not None else f"{'-':>10}"
        fb = f"{b:10.4f}" if b is not None else f"{'-':>10}"
        ratio = f"{b / a:12.2f}" if a and b else f"{'-':>12}"
        label = op if k == 0 else f"{op} #{k + 1}"
        print(f"  {label:<22} {direction:<4} {fa} {fb} {ratio}")
    step_ct = ct.get(("step (CUDA graph)", "-", 0))
    step_pt = pt.get(("step (model)", "-", 0))
    print("# one training step (B=128, L=200, d=50, 2 blocks, h=1)")
    print(f"  ctrun kernels, one CUDA graph : {step_ct:.4f} ms" if step_ct else
          "  ctrun kernels, one CUDA graph : not measured")
    print(f"  PyTorch reference model       : {step_pt:.4f} ms" if step_pt else
          "  PyTorch reference model       : not measured")
    if step_ct and step_pt:
        print(f"  speed-up over PyTorch         : {step_pt / step_ct:.2f}x (target >= 5x)")
    if step_ct:
        print(f"  roofline estimate 0.2-0.3 ms  : {step_ct / 0.25:.2f}x of 0.25 ms (target <= 2x)")


if __name__ == "__main__":
    main()
