#!/usr/bin/env python3
"""warm_bench.py - recovery time of a PyTorch DDP job after `kill -9` of one worker: ctrun cold,
ctrun --warm_restart and torchrun in one run, N trials each.

    warm_bench.py --ctrun build/launcher/ctrun [--python PY] [--trials 3] [--nproc 2]

The job is ddp_snapshot.py (gloo, snapshot every epoch). Once attempt 0 has run --warmup_s
seconds and saved a snapshot, rank 1's worker gets SIGKILL; measured on CLOCK_MONOTONIC from
the kill to the first RESUMED line of the next attempt (the snapshot loaded) and to its first
STEP line (the first training step after the resume, after the gloo rendezvous). The job is
then stopped with SIGTERM. A trial whose job does not resume within 60 s is reported as such
(torchrun's restarted workers can fail in gloo's connect or hang, see
docs/torchrun-compatibility.md). Prints one row per launcher and trial, and a markdown table of all.
"""
import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "ddp_snapshot.py")
VERBOSE = False
LINE = re.compile(r"^(?:\[[^\]]*\]:)?(START|RESUMED|STEP|EPOCH) (.*) t=([0-9.]+)$")


def parse(line):
    m = LINE.match(line.strip())
    if not m:
        return None
    kv = dict(x.split("=", 1) for x in m.group(2).split())
    return m.group(1), kv, float(m.group(3))


def trial(name, cmd, env, warmup_s, timeout_s=60, log=None):
    work = tempfile.mkdtemp(prefix="warm_bench_")
    snap = os.path.join(work, "snapshot.pt")
    full = cmd + [PROG, "--snapshot", snap]
    p = subprocess.Popen(full, cwd=work, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    events = []
    cond = threading.Condition()

    def reader():
        for line in p.stdout:
            if log is not None:
                log.write("%.6f %s" % (time.monotonic(), line))
            ev = parse(line)
            if ev:
                with cond:
                    events.append(ev)
                    cond.notify_all()

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    t_start = time.monotonic()
    result = None
    try:
        victim = None
        with cond:
            while True:
                if time.monotonic() - t_start > timeout_s:
                    raise RuntimeError("%s: no snapshot in time" % name)
                starts = [e for e in events if e[0] == "START"]
                epochs = [e for e in events if e[0] == "EPOCH"]
                if starts and epochs and os.path.exists(snap) and \
                        time.monotonic() - t_start >= warmup_s:
                    victim = [int(e[1]["pid"]) for e in starts if e[1]["rank"] == "1"][-1]
                    break
                cond.wait(0.1)
            seen = len(events)
        t_kill = time.monotonic()
        os.kill(victim, signal.SIGKILL)
        resumed = step = None
        with cond:
            while resumed is None or step is None:
                if time.monotonic() - t_kill > timeout_s:
                    raise RuntimeError("%s: no resume in time" % name)
                for e in events[seen:]:
                    if e[0] == "RESUMED" and e[2] > t_kill and resumed is None:
                        resumed = e[2]
                    if e[0] == "STEP" and e[2] > t_kill and resumed is not None and step is None:
                        step = e[2]
                cond.wait(0.1)
        result = (resumed - t_kill, step - t_kill)
        if VERBOSE:
            for e in events[seen:]:
                print("    %+.3f %s %s" % (e[2] - t_kill, e[0], e[1]))
    finally:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        shutil.rmtree(work, ignore_errors=True)
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    ap.add_argument("--python", default=os.environ.get(
        "CTRUN_TORCH2_PYTHON", os.path.expanduser("~/.venvs/torch2/bin/python")))
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--warmup_s", type=float, default=8.0,
                    help="attempt 0's run time before the kill (the standbys import meanwhile)")
    ap.add_argument("--only", default="ctrun_cold,ctrun_warm,torchrun")
    ap.add_argument("--out", default="",
                    help="folder for each trial's launcher output, with monotonic time stamps")
    ap.add_argument("--verbose", action="store_true",
                    help="print every worker event after the kill, relative to it")
    args = ap.parse_args()
    global VERBOSE
    VERBOSE = args.verbose
    ctrun = os.path.abspath(args.ctrun)
    common = ["--standalone", "--nproc_per_node=%d" % args.nproc, "--max_restarts=3"]
    launchers = {
        "ctrun_cold": [ctrun] + common + ["--python", args.python],
        "ctrun_warm": [ctrun] + common + ["--warm_restart", "--python", args.python],
        "torchrun": [args.python, "-m", "torch.distributed.run"] + common,
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PET_", "TORCHELASTIC_"))}
    env.pop("CTRUN_WARM_RESTART", None)
    rows = {}
    for name in args.only.split(","):
        rows[name] = []
        for k in range(args.trials):
            log = None
            if args.out:
                os.makedirs(args.out, exist_ok=True)
                log = open(os.path.join(args.out, "%s_%d.log" % (name, k + 1)), "w")
            try:
                r = trial(name, launchers[name], env, args.warmup_s, log=log)
            except RuntimeError as e:
                r = None  # the job never resumed (torchrun's restarts are not reliable)
                print("%-11s trial %d: %s" % (name, k + 1, e), flush=True)
            finally:
                if log is not None:
                    log.close()
            rows[name].append(r)
            if r is not None:
                print("%-11s trial %d: kill -> resumed %.3f s, kill -> first step %.3f s" %
                      (name, k + 1, r[0], r[1]), flush=True)
    print("\n| launcher | kill -> resumed (s) | kill -> first step (s) | median resumed / step |")
    print("|---|---|---|---|")
    for name, rs in rows.items():
        ok = [r for r in rs if r is not None]
        med = "%.2f / %.2f" % (statistics.median(r[0] for r in ok),
                               statistics.median(r[1] for r in ok)) if ok else "-"
        print("| %s | %s | %s | %s |" % (
            name, ", ".join("%.2f" % r[0] if r else "no resume" for r in rs),
            ", ".join("%.2f" % r[1] if r else "no resume" for r in rs), med))
    return 0


if __name__ == "__main__":
    sys.exit(main())
