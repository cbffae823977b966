#!/usr/bin/env python3
"""temporal_gen.py DUMPER TMPDIR - compares ctrain's curve generator (DUMPER: test_temporal_gen,
its `dump` mode) with examples/pytorch/temporal_curves.make, bit for bit: every float32 of every
curve and every description, for seeds and indices of one to four 32-bit words of entropy,
indices 0..2000 and near 2^32 and 2^64, and lengths 1, 2, 17, 256 and 1000 (with one or two
points most samples have more spikes than points: both sides must refuse the same ones); and
800,000 float64 standard normal draws, whose last bits the float32 curves can hide.
Prints one line per case and the totals; exit 1 on any difference, 77 without numpy."""
import os
import struct
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402

CASES = [  # seed, first i, count, length
    (0, 0, 2001, 256), (1, 0, 2001, 1), (2, 0, 2001, 2), (3, 0, 2001, 17), (4, 0, 400, 1000),
    (5, 2 ** 32 - 100, 200, 256), (123456789012, 2 ** 64 - 150, 150, 64),
    (2 ** 32, 7, 200, 256), (2 ** 31 - 1, 10 ** 6, 300, 33),
]


def compare(dumper, path, seed, first, count, length):
    subprocess.check_call([dumper, "dump", str(seed), str(first), str(count), str(length), path])
    with open(path, "rb") as f:
        b = f.read()
    o = curves = points = texts = refusals = 0
    for k in range(count):
        status = b[o]
        o += 1
        try:
            c, t = temporal_curves.make(seed, first + k, length)
        except ValueError:
            c = t = None
        if c is None or status:
            if (c is None) != bool(status):
                print("sample %d of seed %d, length %d: refused by %s only" % (
                    first + k, seed, length, "numpy" if c is None else "ctrain"))
                refusals += 1
            if status:
                continue
            o += 4 * length
            n, = struct.unpack_from("<H", b, o)
            o += 2 + n
            continue
        mine = np.frombuffer(b, dtype=np.float32, count=length, offset=o)
        o += 4 * length
        n, = struct.unpack_from("<H", b, o)
        text = b[o + 2:o + 2 + n].decode("utf-8", "replace")
        o += 2 + n
        d = int((mine.view(np.uint32) != c.view(np.uint32)).sum())
        if d:
            curves += 1
            points += d
            if curves <= 3:
                print("sample %d of seed %d, length %d: %d points differ" % (first + k, seed,
                                                                             length, d))
        if text != t:
            texts += 1
            if texts <= 3:
                print("sample %d of seed %d: %r, numpy %r" % (first + k, seed, text, t))
    if o != len(b):
        print("dump of seed %d: %d bytes left over" % (seed, len(b) - o))
        refusals += 1
    print("seed %d, i %d..%d, length %d: %d curves differ (%d points), %d descriptions, "
          "%d refusals" % (seed, first, first + count - 1, length, curves, points, texts,
                           refusals))
    return curves, texts, refusals


def normals(dumper, path, seed, count):
    """The float64 standard normals of default_rng(seed): every bit, the tail's included."""
    subprocess.check_call([dumper, "normal", str(seed), str(count), path])
    mine = np.fromfile(path, dtype=np.float64)
    ref = np.random.default_rng(seed).standard_normal(count)
    d = int((mine.view(np.uint64) != ref.view(np.uint64)).sum()) if mine.size == count else count
    tail = int((np.abs(ref) > 3.6541528853610088).sum())
    print("standard_normal of seed %d: %d draws (%d beyond the ziggurat's base, r), %d differ" % (
        seed, count, tail, d))
    return d


def main():
    dumper, tmp = sys.argv[1], sys.argv[2]
    bad = sum(normals(dumper, os.path.join(tmp, "normal.bin"), s, 400000) for s in (0, 2 ** 31 - 1))
    total = [0, 0, 0]
    n = 0
    for case in CASES:
        r = compare(dumper, os.path.join(tmp, "dump.bin"), *case)
        total = [a + b for a, b in zip(total, r)]
        n += case[2]
    print("%d samples compared: %d curves, %d descriptions and %d refusals differ" % (
        n, *total))
    sys.exit(1 if any(total) or bad else 0)


if __name__ == "__main__":
    main()
