#!/usr/bin/env python3
"""temporal_pregen.py CTRAIN CTRUN TMPDIR - ctrain --model temporal --pregenerate against
examples/pytorch/pregenerate_temporal_data.py (temporal_curves.write_cache):
  - the same seed, count and length give byte-identical meta.json, curves.npy and
    descriptions.jsonl (one thread, and three threads over more than one chunk of curves);
  - temporal_curves.read_cache reads ctrain's cache (so the reference trains on it) and ctrain
    trains on the Python program's cache (one epoch, one validation loss);
  - --seed, data.seed from --config, and the defaults (seed 0, 256 points);
  - a cache folder that cannot be completed (curves.npy is a non-empty folder) leaves an error
    naming it, no meta.json and no temporary file; --pregenerate without --output_dir, with
    --seq_len below 8, or for another model is a one-line error.
Exit 1 on any difference, 77 without numpy."""
import os
import subprocess
import sys

try:
    import numpy as np
except ImportError:
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples", "pytorch"))
import temporal_curves  # noqa: E402

FILES = ("meta.json", "curves.npy", "descriptions.jsonl")
failures = []


def check(cond, what):
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        failures.append(what)


def ctrain(ctr, *args):
    return subprocess.run([ctr, "--model", "temporal"] + list(args), capture_output=True,
                          text=True, timeout=240)


def same(a, b):
    for f in FILES:
        with open(os.path.join(a, f), "rb") as x, open(os.path.join(b, f), "rb") as y:
            if x.read() != y.read():
                return f
    return None


def main():
    ctr, tmp = sys.argv[1], sys.argv[3]
    cases = [  # ctrain's arguments, (seed, n, length) of the Python program
        (["--pregenerate", "300", "--seed", "5", "--seq_len", "64"], (5, 300, 64)),
        (["--pregenerate", "20000", "--seed", "3", "--seq_len", "17", "--threads", "3"],
         (3, 20000, 17)),
        (["--pregenerate", "50"], (0, 50, 256)),
    ]
    for k, (args, ref) in enumerate(cases):
        a, b = os.path.join(tmp, "c%d" % k), os.path.join(tmp, "p%d" % k)
        r = ctrain(ctr, *(args + ["--output_dir", a]))
        check(r.returncode == 0 and "wrote %d curves" % ref[1] in r.stdout,
              "ctrain %s: exit %d %s" % (" ".join(args), r.returncode, r.stderr.strip()))
        temporal_curves.write_cache(b, ref[0], ref[1], ref[2], log=None)
        diff = same(a, b) if r.returncode == 0 else "all"
        check(diff is None, "%s: byte-identical to write_cache%s" % (
            " ".join(args), "" if diff is None else " (%s differs)" % diff))
        check(sorted(os.listdir(a)) == sorted(FILES), "%s: only the three files" % a)
    curves, texts, meta = temporal_curves.read_cache(os.path.join(tmp, "c0"))
    check(curves.shape == (300, 64) and len(texts) == 300 and meta["seed"] == 5,
          "read_cache reads ctrain's cache")

    # data.seed from --config
    cfg = os.path.join(tmp, "cfg.yaml")
    with open(cfg, "w") as f:
        f.write("data:\n  seed: 9\n  seq_len: 32\n")
    r = ctrain(ctr, "--config", cfg, "--pregenerate", "40", "--output_dir",
               os.path.join(tmp, "y"))
    temporal_curves.write_cache(os.path.join(tmp, "yp"), 9, 40, 32, log=None)
    check(r.returncode == 0 and same(os.path.join(tmp, "y"), os.path.join(tmp, "yp")) is None,
          "data.seed and data.seq_len of --config")

    # ctrain trains on the Python program's cache
    r = ctrain(ctr, "--dataset", os.path.join(tmp, "p0"), "--num_epochs", "1",
               "--hidden_units", "16", "--num_heads", "2", "--num_blocks", "1",
               "--ff_dim", "32", "--patch_len", "8", "--batch_size", "32",
               "--train_dir", os.path.join(tmp, "run"))
    check(r.returncode == 0 and "val_loss" in r.stdout,
          "ctrain trains on write_cache's folder: exit %d %s" % (r.returncode,
                                                                 r.stderr.strip()[-300:]))

    # a cache that cannot be completed: no meta.json, no temporary file
    bad = os.path.join(tmp, "bad")
    os.makedirs(os.path.join(bad, "curves.npy", "x"))
    with open(os.path.join(bad, "meta.json"), "w") as f:
        f.write('{"seed": 0, "num_samples": 1, "length": 8, "version": 1}')
    r = ctrain(ctr, "--pregenerate", "10", "--output_dir", bad)
    left = sorted(os.listdir(bad))
    check(r.returncode != 0 and "curves.npy" in r.stderr and left == ["curves.npy"],
          "unfinishable cache: exit %d, %r, left %r" % (r.returncode, r.stderr.strip(), left))

    for args, want in ((["--pregenerate", "10"], "--output_dir"),
                       (["--pregenerate", "10", "--output_dir", bad, "--seq_len", "4"],
                        "--seq_len"),
                       (["--pregenerate", "0", "--output_dir", bad], "--pregenerate")):
        r = ctrain(ctr, *args)
        lines = r.stderr.strip().splitlines()
        check(r.returncode != 0 and len(lines) == 1 and want in lines[0],
              "%s: one line naming %s (%r)" % (" ".join(args), want, r.stderr.strip()))
    r = subprocess.run([ctr, "--model", "sasrec", "--pregenerate", "10", "--output_dir", bad],
                       capture_output=True, text=True)
    check(r.returncode != 0 and "--model temporal" in r.stderr, "--pregenerate of sasrec")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
