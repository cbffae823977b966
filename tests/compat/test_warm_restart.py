#!/usr/bin/env python3
"""test_warm_restart.py - ctrun --warm_restart against cold starts, in the same job.

    test_warm_restart.py --torch pt13|pt2 --ctrun EXE

Each job runs warm_probe.py on two workers with --max_restarts 1: attempt 0's workers start
cold, rank 1 fails, and attempt 1's workers are forked from the standbys. Every worker writes
what it sees (argv, sys.path, __main__'s attributes, environment, descriptors 0-7, signal
dispositions and mask, session and process group, parent, sys.flags, stdout's buffering); a
warm worker must see what the cold worker of the same rank saw, up to what belongs to the
attempt. report.json must count attempt 1's workers as warm. Cases:
  script   a script with arguments, stdin /dev/null; attempt 1 runs DataLoaders with two
           workers (fork and spawn) and a gloo all_reduce
  module   -m warm_pkg.probe_mod with stdin closed
  record   attempt 1's rank 1 raises in a @record function: the failure report has its message
           from the error file and ctrun exits 1
  signals  attempt 1's rank 1 kills itself with SIGKILL: reported as that signal (report.json's
           cause says "(warm worker)"); rank 0 gets ctrun's SIGTERM in its own handler (the
           signal reaches the worker, not the standby)
  preload  --warm_preload json,no_such_module_x: the standby cannot import it; one warning,
           attempt 1 starts cold and the job succeeds
pt13 is Debian's PyTorch 1.13 (CTRUN_TORCH13_PYTHON, default /usr/bin/python3), pt2 a PyTorch
>= 2.2 (CTRUN_TORCH2_PYTHON); exits 77 (skip) when that interpreter cannot import torch.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compat_util import python_can, torch2_python  # noqa: E402

# What differs between attempts by design.
ATTEMPT_VARS = {"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_ERROR_FILE"}


class Fail(Exception):
    pass


def run_job(ctrun, py, work, extra, act, stdin, timeout=240):
    out = os.path.join(work, "out")
    logs = os.path.join(work, "logs")
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, WARM_OUT=out, WARM_ACT=json.dumps(act), LOGLEVEL="INFO")
    env.pop("CTRUN_WARM_RESTART", None)
    cmd = [ctrun, "--standalone", "--nproc_per_node=2", "--max_restarts=1", "--warm_restart",
           "--monitor_interval=0.1", "--log_dir", logs, "--python", py] + extra
    kw = {}
    if stdin == "closed":
        kw["preexec_fn"] = lambda: os.close(0)
    else:
        kw["stdin"] = subprocess.DEVNULL
    p = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, **kw)
    text = p.stdout.decode(errors="replace")
    reports = []
    for root, _, files in os.walk(logs):
        if "report.json" in files:
            with open(os.path.join(root, "report.json")) as f:
                reports.append(json.load(f))
    return p.returncode, text, out, reports


def load(out, tag, attempt, rank):
    path = os.path.join(out, "%s_a%d_r%d.json" % (tag, attempt, rank))
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def compare(out, ctrun_pid_check=True):
    for rank in (0, 1):
        cold, warm = load(out, "snap", 0, rank), load(out, "snap", 1, rank)
        if cold is None or warm is None:
            raise Fail("rank %d: missing snapshot (cold %s, warm %s)" % (rank, cold is not None,
                                                                      warm is not None))
        for k in ("pid",):
            cold.pop(k), warm.pop(k)
        ce, we = cold.pop("env"), warm.pop("env")
        for v in ATTEMPT_VARS:
            ce.pop(v, None), we.pop(v, None)
        if ce != we:
            diff = {k: (ce.get(k), we.get(k)) for k in set(ce) | set(we) if ce.get(k) != we.get(k)}
            raise Fail("rank %d: environment differs (cold, warm): %s" % (rank, diff))
        if cold != warm:
            diff = {k: (cold.get(k), warm.get(k)) for k in cold if cold.get(k) != warm.get(k)}
            raise Fail("rank %d: cold and warm workers differ (cold, warm): %s" % (rank, diff))
        if not warm["session_leader"] or not warm["pgid_is_pid"]:
            raise Fail("rank %d: warm worker is not its own session and group" % rank)


def check_warm_report(reports, want):
    if len(reports) != 1:
        raise Fail("expected one report.json, found %d" % len(reports))
    starts = {s["attempt"]: s for s in reports[0].get("attempt_starts", [])}
    got = (starts.get(0, {}).get("warm_workers"), starts.get(1, {}).get("warm_workers"))
    if got != want:
        raise Fail("report.json attempt_starts: warm workers %s, expected %s: %s" % (
            got, want, reports[0]))


def case_script(ctrun, py, work):
    act = {"0/1": "exit3", "0/0": "sleep", "1/0": "work", "1/1": "work"}
    shutil.copy(os.path.join(HERE, "warm_probe.py"), work)
    shutil.copy(os.path.join(HERE, "warm_probe_work.py"), work)
    rc, text, out, reports = run_job(ctrun, py, work, ["warm_probe.py", "x y", "--z=1"], act,
                                     "devnull")
    if rc != 0:
        raise Fail("exit %d:\n%s" % (rc, text[-4000:]))
    compare(out)
    for rank in (0, 1):
        w = load(out, "work", 1, rank)
        want = {"fork": 140, "spawn": 140, "gloo": 3.0}
        if w != want:
            raise Fail("rank %d: work %s, expected %s\n%s" % (rank, w, want, text[-3000:]))
    if "forked from standby" not in text:
        raise Fail("no warm start logged:\n" + text[-3000:])
    check_warm_report(reports, (0, 2))


def case_module(ctrun, py, work):
    act = {"0/1": "exit3", "0/0": "sleep"}
    shutil.copytree(os.path.join(HERE, "warm_pkg"), os.path.join(work, "warm_pkg"))
    shutil.copy(os.path.join(HERE, "warm_probe.py"), work)
    shutil.copy(os.path.join(HERE, "warm_probe_work.py"), work)
    rc, text, out, reports = run_job(ctrun, py, work, ["-m", "warm_pkg.probe_mod", "arg1"], act,
                                     "closed")
    if rc != 0:
        raise Fail("exit %d:\n%s" % (rc, text[-4000:]))
    compare(out)
    snap = load(out, "snap", 1, 0)
    if snap["name"] != "__main__" or not snap["argv"][0].endswith("probe_mod.py") or \
            snap["argv"][1:] != ["arg1"] or not snap["stdin_none"]:
        raise Fail("-m worker: %s" % {k: snap[k] for k in ("name", "argv", "stdin_none")})
    check_warm_report(reports, (0, 2))


def case_record(ctrun, py, work):
    act = {"0/1": "exit3", "0/0": "sleep", "1/1": "raise", "1/0": "sleep"}
    shutil.copy(os.path.join(HERE, "warm_probe.py"), work)
    shutil.copy(os.path.join(HERE, "warm_probe_work.py"), work)
    rc, text, out, reports = run_job(ctrun, py, work, ["warm_probe.py"], act, "devnull")
    if rc != 1:
        raise Fail("exit %d, expected 1:\n%s" % (rc, text[-4000:]))
    if "warm boom from rank 1" not in text or "ValueError" not in text:
        raise Fail("the failure report lacks the error file's message:\n" + text[-4000:])
    check_warm_report(reports, (0, 2))


def case_signals(ctrun, py, work):
    act = {"0/1": "exit3", "0/0": "sleep", "1/1": "sigkill", "1/0": "wait_term"}
    shutil.copy(os.path.join(HERE, "warm_probe.py"), work)
    shutil.copy(os.path.join(HERE, "warm_probe_work.py"), work)
    rc, text, out, reports = run_job(ctrun, py, work, ["warm_probe.py"], act, "devnull")
    if rc != 1:
        raise Fail("exit %d, expected 1:\n%s" % (rc, text[-4000:]))
    if "SIGKILL" not in text:
        raise Fail("rank 1's SIGKILL is not reported:\n" + text[-4000:])
    causes = [f["cause"] for f in reports[0]["failures"] if f["attempt"] == 1] if reports else []
    if not any(c.endswith("(warm worker)") and "SIGKILL" in c for c in causes):
        raise Fail("report.json does not name the warm worker's SIGKILL: %s" % causes)
    term = load(out, "term", 1, 0)
    snap = load(out, "snap", 1, 0)
    if term is None or term["pid"] != snap["pid"]:
        raise Fail("rank 0 did not get SIGTERM in its handler (%s):\n%s" % (term, text[-4000:]))
    check_warm_report(reports, (0, 2))


def case_preload(ctrun, py, work):
    act = {"0/1": "exit3", "0/0": "sleep"}
    shutil.copy(os.path.join(HERE, "warm_probe.py"), work)
    shutil.copy(os.path.join(HERE, "warm_probe_work.py"), work)
    rc, text, out, reports = run_job(ctrun, py, work, ["--warm_preload", "json,no_such_module_x",
                                                       "warm_probe.py"], act, "devnull")
    if rc != 0:
        raise Fail("exit %d:\n%s" % (rc, text[-4000:]))
    lines = [l for l in text.splitlines() if "no_such_module_x" in l and "cold" in l]
    if len(lines) != 2:  # one per local rank
        raise Fail("expected one warning per rank naming the module:\n" + text[-4000:])
    compare(out)  # cold both times: still the same
    check_warm_report(reports, (0, 0))


CASES = {"script": case_script, "module": case_module, "record": case_record,
         "signals": case_signals, "preload": case_preload}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", choices=["pt13", "pt2"], required=True)
    ap.add_argument("--ctrun", required=True)
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    py = (os.environ.get("CTRUN_TORCH13_PYTHON", "/usr/bin/python3") if args.torch == "pt13"
          else torch2_python())
    if not python_can(py, "import torch"):
        print("SKIP: %s cannot import torch" % py)
        return 77
    failed = 0
    for name, fn in CASES.items():
        if args.only and name not in args.only.split(","):
            continue
        work = tempfile.mkdtemp(prefix="ctrun_warm_")
        try:
            fn(os.path.abspath(args.ctrun), py, work)
            print("ok   %s" % name, flush=True)
        except (Fail, subprocess.TimeoutExpired) as e:
            failed += 1
            print("FAIL %s: %s" % (name, e), flush=True)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
