#!/usr/bin/env python3
"""test_pip_install.py SOURCE_DIR - ctrun installed with pip into a fresh virtual environment.

Builds the sdist and the wheel with `python -m build` (meson-python, fetched by pip into the
build's isolated environment) in a fresh build environment, installs the wheel into a second
fresh environment, and checks: ctrun, ctrun-launch, ctrun-store and ctrain are in its bin/ and
answer --version; `python -m ctrun --version` runs the launcher; nothing named torchrun is
installed; and a two-worker gloo job started as <venv>/bin/ctrun, without activating the
environment (no VIRTUAL_ENV, a PATH without its bin/), runs its workers with that environment's
Python (sys.prefix), which ctrun names at INFO.

PyTorch: the second environment sees the PyTorch 2.x environment's packages through a .pth file
(CTRUN_TORCH2_PYTHON, default ~/.venvs/torch2/bin/python), so that nothing large is downloaded.
Exits 77 with a message when that PyTorch is missing or pip cannot get the build requirements
(no network and no local wheel folder).
"""
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

JOB = r'''
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
with open(os.path.join(sys.argv[1], "rank%d.json" % dist.get_rank()), "w") as f:
    json.dump({"prefix": sys.prefix, "executable": sys.executable, "sum": t.item(),
               "world": dist.get_world_size()}, f)
dist.destroy_process_group()
'''


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def run(cmd, what, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if p.returncode != 0:
        fail("%s: exit %d\n%s\n%s" % (what, p.returncode, p.stdout[-4000:], p.stderr[-4000:]))
    return p


def main():
    src = os.path.abspath(sys.argv[1])
    torch_py = os.environ.get("CTRUN_TORCH2_PYTHON",
                              os.path.expanduser("~/.venvs/torch2/bin/python"))
    probe = subprocess.run([torch_py, "-c", "import torch, site, sys; "
                            "print(torch.__file__.rsplit('/torch/', 1)[0])"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        print("SKIP: no PyTorch 2.x at %s (CTRUN_TORCH2_PYTHON)" % torch_py)
        sys.exit(77)
    torch_site = probe.stdout.strip().splitlines()[-1]
    base_py = subprocess.run([torch_py, "-c", "import sys; print(sys._base_executable)"],
                             capture_output=True, text=True).stdout.strip() or sys.executable

    tmp = tempfile.mkdtemp(prefix="ctrun_pip_")
    try:
        # 1. sdist and wheel with python -m build, from a fresh build environment.
        bvenv = os.path.join(tmp, "buildenv")
        run([base_py, "-m", "venv", bvenv], "venv for the build")
        p = subprocess.run([os.path.join(bvenv, "bin", "pip"), "install", "-q", "build"],
                           capture_output=True, text=True)
        if p.returncode != 0:
            print("SKIP: pip cannot install 'build' (offline?):\n" + p.stderr[-1500:])
            sys.exit(77)
        dist_dir = os.path.join(tmp, "dist")
        p = subprocess.run([os.path.join(bvenv, "bin", "python"), "-m", "build", "--outdir",
                            dist_dir, src], capture_output=True, text=True)
        if p.returncode != 0:
            if "Could not find a version that satisfies" in p.stdout + p.stderr:
                print("SKIP: pip cannot get meson-python (offline?)")
                sys.exit(77)
            fail("python -m build:\n%s\n%s" % (p.stdout[-6000:], p.stderr[-3000:]))
        sdists = glob.glob(os.path.join(dist_dir, "ctrun-*.tar.gz"))
        wheels = glob.glob(os.path.join(dist_dir, "ctrun-*.whl"))
        if len(sdists) != 1 or len(wheels) != 1:
            fail("python -m build made %s" % os.listdir(dist_dir))
        print("  built %s and %s" % (os.path.basename(sdists[0]), os.path.basename(wheels[0])))

        # 2. A fresh environment, PyTorch visible through a .pth file, the wheel installed.
        venv = os.path.join(tmp, "venv")
        run([base_py, "-m", "venv", venv], "venv")
        vpy = os.path.join(venv, "bin", "python")
        purelib = run([vpy, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                      "purelib").stdout.strip()
        with open(os.path.join(purelib, "ctrun_test_torch.pth"), "w") as f:
            f.write(torch_site + "\n")
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-deps", wheels[0]],
            "pip install of the wheel")
        bindir = os.path.join(venv, "bin")
        for exe in ("ctrun", "ctrun-launch", "ctrun-store", "ctrain"):
            path = os.path.join(bindir, exe)
            if not os.access(path, os.X_OK):
                fail("no %s in %s: %s" % (exe, bindir, sorted(os.listdir(bindir))))
            run([path, "--version"], exe + " --version")
        if os.path.exists(os.path.join(bindir, "torchrun")):
            fail("the wheel installed a torchrun command")
        out = run([vpy, "-m", "ctrun", "--version"], "python -m ctrun --version").stdout
        if "ctrun" not in out:
            fail("python -m ctrun --version printed %r" % out)

        # 3. The job, through the environment's ctrun, not activated.
        env = {k: v for k, v in os.environ.items()
               if k not in ("VIRTUAL_ENV", "CONDA_PREFIX", "CTRUN_PYTHON", "PYTHON_EXEC",
                            "PYTHONPATH", "PYTHONHOME", "CT_LOG_LEVEL")}
        env.update(PATH="/usr/bin:/bin", LOGLEVEL="INFO", OMP_NUM_THREADS="1")
        job = os.path.join(tmp, "job.py")
        with open(job, "w") as f:
            f.write(JOB)
        out_dir = os.path.join(tmp, "out")
        os.makedirs(out_dir)
        p = run([os.path.join(bindir, "ctrun"), "--nproc_per_node=2", "--log_dir=/dev/null",
                 job, out_dir], "the job", env=env, timeout=300)
        want = "worker interpreter: %s (the Python environment ctrun is installed in)" % (
            os.path.join(bindir, "python3"))
        if want not in p.stderr:
            fail("no %r at INFO:\n%s" % (want, p.stderr[-3000:]))
        for r in range(2):
            with open(os.path.join(out_dir, "rank%d.json" % r)) as f:
                got = json.load(f)
            if (os.path.realpath(got["prefix"]) != os.path.realpath(venv) or got["sum"] != 3.0
                    or got["world"] != 2):
                fail("rank %d saw %s (want prefix %s, sum 3)" % (r, got, venv))
        print("ok - pip-installed ctrun ran a two-worker job with %s, not activated"
              % os.path.join(bindir, "python3"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
