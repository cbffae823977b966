"""test_filetimer_pytorch.py - torchrun's FileTimer watchdog under ctrun, with unmodified
PyTorch 2.x (torch.distributed.elastic.timer): with TORCHELASTIC_ENABLE_FILE_TIMER=1 every
worker gets TORCHELASTIC_TIMER_FILE; timer_job.py's rank 1 overruns expires(after=2) in
attempt 0.
  1. --max_restarts=1: the overrunning worker is killed (its timer named), the job restarts and
     the next attempt finishes: exit 0; a line that is not JSON and a request for a foreign pid
     were dropped with a warning each; the named pipe ctrun made is gone afterwards.
  2. --max_restarts=0: exit 1, the failure report's root cause and report.json name the timer.
  3. A TORCHELASTIC_TIMER_FILE that exists and is not a named pipe: exit 1 naming it, no worker.
Prints the time from the timer's expiry to the worker's kill (the recovery table's detect
column). Skips (77) without PyTorch 2.x at CTRUN_TORCH2_PYTHON (default
~/.venvs/torch2/bin/python).

  test_filetimer_pytorch.py --ctrun PATH
"""
import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

from compat_util import python_can, torch2_python

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "timer_job.py")


def run(ctrun, py, tmp, restarts, extra_env=None, log_dir="/dev/null"):
    env = dict(os.environ, TORCHELASTIC_ENABLE_FILE_TIMER="1", TMPDIR=tmp)
    env.update(extra_env or {})
    p = subprocess.run([ctrun, "--standalone", "--nproc_per_node=2",
                        "--max_restarts=%d" % restarts, "--log_dir=%s" % log_dir, "--python", py,
                        JOB], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=240)
    return p.returncode, p.stdout.decode(errors="replace")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    args = ap.parse_args()
    py = torch2_python()
    if not python_can(py, "import torch.distributed.elastic.timer as t; t.FileTimerClient"):
        print("SKIP: no PyTorch 2.x with torch.distributed.elastic.timer.FileTimerClient at %s "
              "(set CTRUN_TORCH2_PYTHON)" % py)
        return 77
    tmp = tempfile.mkdtemp(prefix="filetimer_")
    failed = []
    try:
        code, out = run(args.ctrun, py, tmp, 1)
        ok = (code == 0 and "rank 1 attempt 1: step done" in out and
              "timer 'step' expired" in out and "timer request is not JSON" in out and
              "pid 1 is not a running worker of this node" in out and
              not glob.glob(os.path.join(tmp, "ctrun-timer-*")))
        m = re.search(r"timer 'step' expired [^\n]*? ([0-9.]+) ms", out)
        if m:
            print("# FileTimer expiry -> worker killed: %s ms" % m.group(1))
        if not ok:
            failed.append("case 1 (exit %d):\n%s" % (code, out))

        logs = os.path.join(tmp, "logs")
        code, out = run(args.ctrun, py, tmp, 0, log_dir=logs)
        reports = glob.glob(os.path.join(logs, "*", "report.json"))
        causes = []
        if reports:
            with open(reports[0]) as f:
                causes = [x["cause"] for x in json.load(f)["failures"]]
        ok = (code == 1 and re.search(r"Root Cause.*traceback : FileTimer: timer 'step' expired",
                                      out, re.S) is not None and
              len(causes) == 1 and causes[0].startswith("timer 'step' expired"))
        if not ok:
            failed.append("case 2 (exit %d, causes %s):\n%s" % (code, causes, out))

        plain = os.path.join(tmp, "plain")
        open(plain, "w").close()
        code, out = run(args.ctrun, py, tmp, 0, {"TORCHELASTIC_TIMER_FILE": plain})
        if code != 1 or "exists and is not a named pipe" not in out or "step starts" in out:
            failed.append("case 3 (exit %d):\n%s" % (code, out))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    for f in failed:
        print("FAIL " + f)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
