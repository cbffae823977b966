#!/usr/bin/env python3
"""pregenerate_temporal_data.py - writes the synthetic curve cache that temporal_encoder_ddp.py
reads with data.cache_dir, so a long run does not generate its curves again in every epoch.

    pregenerate_temporal_data.py --num_samples 100000 --output_dir data/temporal_pretrain/cache
        [--seq_len 256] [--seed 0]

The training program takes its validation samples from the end of the cache
(data.val_fraction). It does not train or tokenize anything.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import temporal_curves  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--num_samples", type=int, required=True)
    ap.add_argument("--output_dir", required=True)
    ap.add_argument("--seq_len", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.num_samples < 1 or a.seq_len < 8:
        ap.error("--num_samples must be >= 1 and --seq_len >= 8")
    t0 = time.time()
    temporal_curves.write_cache(a.output_dir, a.seed, a.num_samples, a.seq_len)
    print("wrote %d curves of %d points (seed %d) to %s in %.1f s" % (
        a.num_samples, a.seq_len, a.seed, a.output_dir, time.time() - t0))


if __name__ == "__main__":
    main()
