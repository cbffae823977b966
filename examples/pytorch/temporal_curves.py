"""temporal_curves.py - the synthetic curves of the temporal encoder example: sample i of a
seed is a curve (trend, seasonality with a period, level shifts, spikes, noise) drawn from its
own random stream, and one English sentence describing it, made from the same parameters.
Also reads and writes the pre-generated cache (pregenerate_temporal_data.py).

numpy only; no torch. It does not split, batch or tokenize: the training program does.
"""
import json
import os

import numpy as np

PERIODS = (8, 12, 16, 24, 32, 48)
NUM_WORDS = {0: "no", 1: "one", 2: "two", 3: "three", 4: "four"}


def sample_params(seed, i):
    r = np.random.default_rng([int(seed), int(i)])
    p = {}
    p["trend"] = str(r.choice(["up", "down", "flat"], p=[0.35, 0.35, 0.30]))
    p["slope"] = 0.0 if p["trend"] == "flat" else float(r.uniform(1.0, 3.0))
    p["seasonal"] = bool(r.random() < 0.7)
    p["period"] = int(r.choice(PERIODS)) if p["seasonal"] else 0
    p["amplitude"] = float(r.uniform(0.5, 1.5)) if p["seasonal"] else 0.0
    p["phase"] = float(r.uniform(0, 2 * np.pi))
    n_shift = int(r.choice([0, 1, 2], p=[0.5, 0.35, 0.15]))
    p["shifts"] = [[float(r.uniform(0.15, 0.85)), float(r.choice([-1, 1]) * r.uniform(1.0, 2.5))]
                   for _ in range(n_shift)]
    p["spikes"] = int(r.choice([0, 1, 2, 3], p=[0.45, 0.25, 0.2, 0.1]))
    p["noise"] = str(r.choice(["low", "high"]))
    p["stream"] = int(r.integers(0, 2 ** 31))
    return p


def render(p, length):
    """The curve of parameters p, length points, float32."""
    r = np.random.default_rng(p["stream"])
    t = np.arange(length, dtype=np.float64)
    u = t / max(1, length - 1)
    sign = {"up": 1.0, "down": -1.0, "flat": 0.0}[p["trend"]]
    y = sign * p["slope"] * u
    if p["seasonal"]:
        y = y + p["amplitude"] * np.sin(2 * np.pi * t / p["period"] + p["phase"])
    for where, size in p["shifts"]:
        y = y + size * (u >= where)
    if p["spikes"]:
        pos = r.choice(length, size=p["spikes"], replace=False)
        y[pos] += r.choice([-1, 1], size=p["spikes"]) * r.uniform(3.0, 5.0, size=p["spikes"])
    y = y + r.normal(0, 0.05 if p["noise"] == "low" else 0.3, size=length)
    return y.astype(np.float32)


def describe(p):
    """One sentence about the curve of parameters p."""
    parts = []
    if p["trend"] == "flat":
        parts.append("a flat curve")
    else:
        parts.append("a %s %s trend" % ("steep" if p["slope"] > 2.0 else "gentle",
                                        "upward" if p["trend"] == "up" else "downward"))
    if p["seasonal"]:
        parts.append("a seasonal cycle of period %d" % p["period"])
    else:
        parts.append("no seasonality")
    shifts = p["shifts"]
    if shifts:
        ups = sum(1 for _, s in shifts if s > 0)
        downs = len(shifts) - ups
        words = []
        if ups:
            words.append("%s upward level shift%s" % (NUM_WORDS[ups], "s" if ups > 1 else ""))
        if downs:
            words.append("%s downward level shift%s" % (NUM_WORDS[downs],
                                                         "s" if downs > 1 else ""))
        parts.append(" and ".join(words))
    k = p["spikes"]
    parts.append("%s spike%s" % (NUM_WORDS[k], "" if k == 1 else "s"))
    text = "%s with %s, %s and %s noise." % (parts[0], ", ".join(parts[1:-1]), parts[-1],
                                             p["noise"])
    return text[0].upper() + text[1:]


def make(seed, i, length):
    p = sample_params(seed, i)
    return render(p, length), describe(p)


def write_cache(out_dir, seed, num_samples, length, log=print):
    """Writes out_dir/curves.npy (float32 [N, length]), descriptions.jsonl and meta.json; the
    files appear complete or not at all (each is renamed into place once written)."""
    os.makedirs(out_dir, exist_ok=True)
    curves = np.empty((num_samples, length), dtype=np.float32)
    tmp_txt = os.path.join(out_dir, "descriptions.jsonl.tmp")
    with open(tmp_txt, "w", encoding="utf-8") as f:
        for i in range(num_samples):
            c, d = make(seed, i, length)
            curves[i] = c
            f.write(json.dumps({"i": i, "text": d}) + "\n")
            if log and (i + 1) % 20000 == 0:
                log("%d/%d curves" % (i + 1, num_samples))
    tmp_npy = os.path.join(out_dir, "curves.tmp.npy")
    np.save(tmp_npy, curves)
    os.replace(tmp_npy, os.path.join(out_dir, "curves.npy"))
    os.replace(tmp_txt, os.path.join(out_dir, "descriptions.jsonl"))
    meta = {"seed": seed, "num_samples": num_samples, "length": length, "version": 1}
    with open(os.path.join(out_dir, "meta.json.tmp"), "w") as f:
        json.dump(meta, f)
    os.replace(os.path.join(out_dir, "meta.json.tmp"), os.path.join(out_dir, "meta.json"))


def read_cache(d):
    """(curves [N, L] float32 memory-mapped, descriptions [N], meta) of a cache folder; a
    ValueError naming what is wrong when it is incomplete."""
    try:
        with open(os.path.join(d, "meta.json")) as f:
            meta = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError("%s: not a curve cache (meta.json: %s); make one with "
                         "pregenerate_temporal_data.py" % (d, e))
    curves = np.load(os.path.join(d, "curves.npy"), mmap_mode="r")
    texts = []
    with open(os.path.join(d, "descriptions.jsonl"), encoding="utf-8") as f:
        for line in f:
            texts.append(json.loads(line)["text"])
    if curves.shape[0] != meta["num_samples"] or len(texts) != meta["num_samples"]:
        raise ValueError("%s: %d curves and %d descriptions, meta.json says %d" % (
            d, curves.shape[0], len(texts), meta["num_samples"]))
    return curves, texts, meta
