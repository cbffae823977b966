#!/usr/bin/env python3
"""temporal_ziggurat_wi.py [DRAWS] - prints the layer widths (wi) of numpy's normal ziggurat as
the C table of worker/trainer/models/temporal/ctrain_temporal_gen.c, measured from numpy's own
draws (the PyTorch 2.x venv's numpy).

Why measured: numpy's tables were computed once, in float64, by a recurrence that amplifies
the last-bit differences between C libraries' exp and log; computed here with glibc the widths
differ from numpy's by a few units in the last place in 151 of the 256 layers, and so do 14%
of the float64 draws. Each draw of layer k is fl(rabs * wi[k]) for the 52-bit integer rabs the
raw 64-bit word carries, so every draw narrows wi[k] down; this script starts from the
recurrence's value and keeps the double within 256 units in the last place that reproduces
every fast-path draw of the layer (about DRAWS / 256 of them), and fails when none or more than
one does. The thresholds (ki) and heights (fi) only decide rare rejections and stay computed.
"""
import math
import sys

import numpy as np

R = 3.6541528853610087963519472518
V = 0.0049286732339746519


def widths_from_recurrence():
    pdf = lambda x: math.exp(-0.5 * x * x)  # noqa: E731
    xs = [R]
    for _ in range(1, 255):
        xs.append(math.sqrt(-2 * math.log(pdf(xs[-1]) + V / xs[-1])))
    xs.append(0.0)
    x = xs[::-1]
    wi = [v / 2 ** 52 for v in x]
    wi[0] = V / pdf(R) / 2 ** 52
    ki = [0] * 256
    ki[0] = round(R * pdf(R) / V * 2 ** 52)
    for k in range(1, 256):
        ki[k] = round(x[k - 1] / x[k] * 2 ** 52)
    return wi, ki


def fis(wi):
    """The layers' heights f(x) from the recurrence's edges (x = wi * 2^52 but the base)."""
    return [1.0] + [math.exp(-0.5 * (w * 2 ** 52) ** 2) for w in wi[1:]]


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000000
    wi, ki = widths_from_recurrence()
    ref = np.random.default_rng(0).standard_normal(n).tolist()
    raw = iter(np.random.PCG64(0).random_raw(4 * n).tolist())
    unit = lambda: (next(raw) >> 11) * (1.0 / 9007199254740992.0)  # noqa: E731
    fi = fis(wi)
    # Follow numpy's consumption of raw words draw by draw: a fast-path draw takes one, a
    # rejection test or the tail takes more (decided with the computed ki and fi, which agree
    # with numpy's but in draws of probability about 1e-15).
    obs = [[] for _ in range(256)]
    for out in ref:
        while True:
            r = next(raw)
            k = r & 0xff
            a = (r >> 9) & 0x000fffffffffffff
            if a < ki[k]:
                obs[k].append((a, abs(out)))
                break
            if k == 0:
                while True:
                    xx = -math.log1p(-unit()) / R
                    yy = -math.log1p(-unit())
                    if yy + yy > xx * xx:
                        break
                break
            x = a * wi[k]
            if (fi[k - 1] - fi[k]) * unit() + fi[k] < math.exp(-0.5 * x * x):
                obs[k].append((a, abs(out)))  # layer 1 returns only this way (ki[1] = 0)
                break
    idx = None
    seen = 0
    table = []
    for k in range(256):
        a = np.array([float(o[0]) for o in obs[k]])
        x = np.array([o[1] for o in obs[k]])
        seen += a.size
        cand = []
        w = wi[k]
        lo = w
        for _ in range(256):
            lo = np.nextafter(lo, 0)
        c = lo
        for _ in range(513):
            if np.array_equal(a * c, x):
                cand.append(c)
            c = np.nextafter(c, 1)
        if len(cand) != 1 or a.size < 16:
            sys.exit("layer %d: %d draws, %d widths fit" % (k, a.size, len(cand)))
        table.append(cand[0])
    sys.stderr.write("%d aligned fast-path draws of default_rng(0), numpy %s\n" % (
        seen, np.__version__))
    for k in range(0, 256, 3):
        print("    " + " ".join("%s," % float(v).hex() for v in table[k:k + 3]))


if __name__ == "__main__":
    main()
