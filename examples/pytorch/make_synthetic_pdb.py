#!/usr/bin/env python3
"""make_synthetic_pdb.py - writes small synthetic PDB files for protein_mae_ddp.py, so that it
can be tried and tested without downloading structures.

    make_synthetic_pdb.py --out_dir data/pdb --num_files 200 [--min_len 40] [--max_len 160]
        [--seed 0]

Each file holds one or two chains. A chain is a run of helix, strand and loop segments; its
C-alpha trace is built from the usual C-alpha geometry of each kind (3.8 A steps; the bond and
dihedral angles of a helix, a strand, or random ones in loops) and each residue is drawn with a
preference for a few residues that depends on its kind of segment and, in helices and strands,
on its position there (one face of a helix, alternate sides of a strand), so masked residues
can be told from the local geometry and their neighbours. The files use the fixed-column ATOM/HETATM format with what real files
have and a reader must get past: N, CA and C atoms per residue, alternate locations,
selenomethionine (MSE) as HETATM, waters, TER, and sometimes a second MODEL. Not a model of real
proteins: its statistics are made up. numpy only.
"""
import argparse
import math
import os

import numpy as np

AA = "ACDEFGHIKLMNPQRSTVWY"
THREE = {"A": "ALA", "C": "CYS", "D": "ASP", "E": "GLU", "F": "PHE", "G": "GLY", "H": "HIS",
         "I": "ILE", "K": "LYS", "L": "LEU", "M": "MET", "N": "ASN", "P": "PRO", "Q": "GLN",
         "R": "ARG", "S": "SER", "T": "THR", "V": "VAL", "W": "TRP", "Y": "TYR"}
# Residues preferred by position: helices are amphipathic (one face, about 100 degrees of turn
# per residue, hydrophobic), strands alternate faces, loops are small and flexible.
PREFER = {"H_in": "LAIM", "H_out": "EKQR", "E_in": "VIFY", "E_out": "TSWC",
          "C": "GPND"}
PREFERENCE = 0.85  # the rest uniform over the 20
# (bond angle, dihedral) of consecutive C-alpha atoms, degrees
GEOMETRY = {"H": (91.0, 50.0), "E": (122.0, -165.0)}


def _place(a, b, c, bond, angle, torsion):
    """The point d with |cd| = bond, angle bcd and dihedral abcd (NeRF)."""
    bc = c - b
    bc /= np.linalg.norm(bc)
    n = np.cross(b - a, bc)
    n /= np.linalg.norm(n)
    m = np.cross(n, bc)
    th, ph = math.radians(angle), math.radians(torsion)
    d2 = np.array([-bond * math.cos(th), bond * math.sin(th) * math.cos(ph),
                   bond * math.sin(th) * math.sin(ph)])
    return c + d2[0] * bc + d2[1] * m + d2[2] * n


def synth_chain(rng, length):
    """(sequence, C-alpha coordinates [length, 3], secondary structure string)."""
    ss = []
    while len(ss) < length:
        kind = rng.choice(["H", "E", "C"], p=[0.45, 0.3, 0.25])
        n = {"H": rng.integers(6, 17), "E": rng.integers(4, 10), "C": rng.integers(2, 7)}[kind]
        ss.extend([kind] * int(n))
    ss = ss[:length]
    xyz = np.zeros((length, 3))
    xyz[1] = [3.8, 0, 0]
    xyz[2] = xyz[1] + 3.8 * np.array([-math.cos(math.radians(110)),
                                      math.sin(math.radians(110)), 0])
    for i in range(3, length):
        if ss[i] in GEOMETRY:
            ang, tor = GEOMETRY[ss[i]]
            ang += rng.normal(0, 3)
            tor += rng.normal(0, 8)
        else:
            ang, tor = rng.uniform(85, 135), rng.uniform(-180, 180)
        xyz[i] = _place(xyz[i - 3], xyz[i - 2], xyz[i - 1], 3.8, ang, tor)
    seq = []
    run = 0
    for i, k in enumerate(ss):
        run = run + 1 if i and ss[i - 1] == k else 0
        if k == "H":
            key = "H_in" if (run * 100) % 360 < 140 else "H_out"
        elif k == "E":
            key = "E_in" if run % 2 == 0 else "E_out"
        else:
            key = "C"
        pool = PREFER[key] if rng.random() < PREFERENCE else AA
        seq.append(pool[rng.integers(len(pool))])
    return "".join(seq), xyz - xyz.mean(0), "".join(ss)


def _atom(rec, serial, name, alt, resn, chain, resseq, xyz, elem, occ=1.0):
    return "%-6s%5d %-4s%1s%3s %1s%4d%1s   %8.3f%8.3f%8.3f%6.2f%6.2f          %2s" % (
        rec, serial, name, alt, resn, chain, resseq, " ", xyz[0], xyz[1], xyz[2], occ, 20.0,
        elem)


def pdb_text(rng, chains, name):
    """PDB text for chains [(chain id, sequence, coordinates)]."""
    lines = ["HEADER    SYNTHETIC PROTEIN                       01-JAN-00   %s" % name[:4].upper()]
    models = 2 if rng.random() < 0.2 else 1
    for model in range(1, models + 1):
        serial = 1
        if models > 1:
            lines.append("MODEL     %4d" % model)
        for cid, seq, xyz in chains:
            alt_at = int(rng.integers(len(seq)))
            for i, aa in enumerate(seq):
                rec, resn = "ATOM", THREE[aa]
                if aa == "M" and rng.random() < 0.5:
                    rec, resn = "HETATM", "MSE"
                ca = xyz[i] + (0 if model == 1 else rng.normal(0, 0.5, 3))
                lines.append(_atom(rec, serial, " N", " ", resn, cid, i + 1,
                                   ca + [-1.2, 0.6, 0.3], " N"))
                serial += 1
                if i == alt_at:  # two alternate locations; readers keep A
                    lines.append(_atom(rec, serial, " CA", "A", resn, cid, i + 1, ca, " C", 0.6))
                    lines.append(_atom(rec, serial + 1, " CA", "B", resn, cid, i + 1,
                                       ca + 0.4, " C", 0.4))
                    serial += 2
                else:
                    lines.append(_atom(rec, serial, " CA", " ", resn, cid, i + 1, ca, " C"))
                    serial += 1
                lines.append(_atom(rec, serial, " C", " ", resn, cid, i + 1,
                                   ca + [1.1, 0.5, -0.4], " C"))
                serial += 1
            lines.append("TER   %5d      %3s %1s%4d" % (serial, THREE[seq[-1]], cid, len(seq)))
            serial += 1
        for w in range(3):  # waters, and a calcium ion whose atom is also called CA
            lines.append(_atom("HETATM", serial, " O", " ", "HOH", "W", w + 1,
                               rng.normal(0, 15, 3), " O"))
            serial += 1
        lines.append(_atom("HETATM", serial, "CA", " ", " CA", "W", 9, rng.normal(0, 15, 3),
                           "CA"))
        if models > 1:
            lines.append("ENDMDL")
    lines.append("END")
    return "\n".join(lines) + "\n"


def write_files(out_dir, num_files, min_len, max_len, seed):
    """Writes num_files files synth_NNNNN.pdb; returns their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for f in range(num_files):
        rng = np.random.default_rng([seed, f])
        chains = []
        for cid in "AB"[: 1 + int(rng.random() < 0.3)]:
            seq, xyz, _ = synth_chain(rng, int(rng.integers(min_len, max_len + 1)))
            chains.append((cid, seq, xyz + rng.normal(0, 20, 3)))
        p = os.path.join(out_dir, "synth_%05d.pdb" % f)
        tmp = "%s.tmp.%d" % (p, os.getpid())
        with open(tmp, "w") as fh:
            fh.write(pdb_text(rng, chains, "s%03d" % (f % 1000)))
        os.replace(tmp, p)
        paths.append(p)
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--num_files", type=int, default=200)
    ap.add_argument("--min_len", type=int, default=40)
    ap.add_argument("--max_len", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not 4 <= a.min_len <= a.max_len <= 9999 or a.num_files < 1:
        ap.error("need --num_files >= 1 and 4 <= --min_len <= --max_len <= 9999")
    write_files(a.out_dir, a.num_files, a.min_len, a.max_len, a.seed)
    print("wrote %d synthetic PDB files to %s" % (a.num_files, a.out_dir))


if __name__ == "__main__":
    main()
