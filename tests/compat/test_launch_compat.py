#!/usr/bin/env python3
"""test_launch_compat.py - command lines of python -m torch.distributed.launch under ctrun-launch.

    test_launch_compat.py --torch pt13|pt2 --ctrun-launch EXE

The guide's two shapes (docs: the SASRec DDP guide), with the launcher's name changed:

    ctrun-launch --nproc_per_node=4 --master_port=P main.py --dataset=ml-1m --train_dir=D \\
        --batch_size=512 --use_amp --multi_gpu
    ctrun-launch --nproc_per_node=2 main.py --dataset=ml-1m --train_dir=D --batch_size=256 \\
        --use_amp --multi_gpu

run launch_job.py, which parses --local-rank / --local_rank, on gloo; every rank must see its own
local rank as the argument and in LOCAL_RANK, and the all_reduce must give the right sum. The
same first command under PyTorch's own launch gives the same argument. pt2 is a PyTorch >= 2.2
(CTRUN_TORCH2_PYTHON, default ~/.venvs/torch2/bin/python: launch passes --local-rank=N), pt13
Debian's 1.13 (CTRUN_TORCH13_PYTHON, default /usr/bin/python3: --local_rank=N, which ctrun-launch
gives with --local_rank_arg=local_rank). Exits 77 when that interpreter cannot import torch.
A third case checks --use_env: no argument, LOCAL_RANK only.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

from compat_util import free_port, python_can, torch2_python

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "launch_job.py")


def run(cmd, env, what):
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    if p.returncode != 0:
        print("FAIL: %s: exit %d\n%s\n%s" % (what, p.returncode, p.stdout, p.stderr))
        sys.exit(1)
    return p


def check_ranks(train_dir, n, arg_given, what):
    for r in range(n):
        with open(os.path.join(train_dir, "rank%d.json" % r)) as f:
            got = json.load(f)
        want_arg = r if arg_given else None
        ok = (got["local_rank_arg"] == want_arg and got["LOCAL_RANK"] == r and got["world"] == n
              and got["sum"] == n * (n + 1) / 2 and got["use_amp"] and got["multi_gpu"])
        if not ok:
            print("FAIL: %s: rank %d saw %s" % (what, r, got))
            sys.exit(1)
    print("ok - %s" % what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", choices=["pt13", "pt2"], required=True)
    ap.add_argument("--ctrun-launch", required=True)
    a = ap.parse_args()
    if a.torch == "pt13":
        py = os.environ.get("CTRUN_TORCH13_PYTHON", "/usr/bin/python3")
        style = ["--local_rank_arg=local_rank"]
    else:
        py = torch2_python()
        style = []
    if not python_can(py, "import torch.distributed as d; assert d.is_gloo_available()"):
        print("SKIP: %s cannot import torch with gloo" % py)
        sys.exit(77)
    tmp = tempfile.mkdtemp(prefix="ctrun_launch_compat_")
    env = dict(os.environ, OMP_NUM_THREADS="1")
    try:
        guide = ["--dataset=ml-1m", "--use_amp", "--multi_gpu"]
        d1 = os.path.join(tmp, "tisasrec_4gpu")
        run([a.ctrun_launch, "--python=" + py] + style +
            ["--nproc_per_node=4", "--master_port=%d" % free_port(), SCRIPT] + guide +
            ["--train_dir=" + d1, "--batch_size=512"], env, "shape 1 under ctrun-launch")
        check_ranks(d1, 4, True, "%s: --nproc_per_node=4 --master_port=P main.py ..." % a.torch)
        d2 = os.path.join(tmp, "tisasrec_2gpu")
        run([a.ctrun_launch, "--python=" + py] + style +
            ["--nproc_per_node=2", SCRIPT] + guide + ["--train_dir=" + d2, "--batch_size=256"],
            env, "shape 2 under ctrun-launch")
        check_ranks(d2, 2, True, "%s: --nproc_per_node=2 main.py ..." % a.torch)
        d3 = os.path.join(tmp, "use_env")
        run([a.ctrun_launch, "--python=" + py, "--use_env", "--nproc_per_node=2", SCRIPT] +
            guide + ["--train_dir=" + d3], env, "--use_env under ctrun-launch")
        check_ranks(d3, 2, False, "%s: --use_env" % a.torch)
        # PyTorch's own launch with the first shape: the same argument reaches the script.
        d4 = os.path.join(tmp, "reference")
        ref = [py, "-m", "torch.distributed.launch", "--nproc_per_node=2",
               "--master_port=%d" % free_port()]
        if a.torch == "pt13":  # its default --redirects/--tee crash on Python 3.11
            ref += ["--redirects", "9:0", "--tee", "9:0", "--monitor_interval", "0.1"]
        run(ref + [SCRIPT] + guide + ["--train_dir=" + d4], env, "torch.distributed.launch")
        check_ranks(d4, 2, True, "%s: torch.distributed.launch itself" % a.torch)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
