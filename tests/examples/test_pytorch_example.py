#!/usr/bin/env python3
"""test_pytorch_example.py - one PyTorch example program (examples/pytorch) under ctrun with two
CPU workers: killed and restarted, it resumes from its newest checkpoint and ends where an
uninterrupted run ends.

    test_pytorch_example.py --ctrun EXE --program temporal_encoder|protein_mae|gpt2rec

Python: $CTRUN_TORCH2_PYTHON, else ~/.venvs/torch2/bin/python (what scripts/test sets up);
exit 77 with the reason when it lacks a package the program needs.

1. A reference run, ctrun --standalone --nproc_per_node=2, the program's --smoke settings with
   more epochs, no fault; it must save at least two epoch checkpoints.
2. The same job in a fresh folder with --max_restarts=2; when the first "saved .../epoch_"
   line arrives, the test SIGKILLs local rank 1 of that attempt (found among ctrun's children
   by its LOCAL_RANK), so the kill always lands between the first checkpoint and the end
   however long the start-up takes on a loaded machine. ctrun must report one failure (rank 1,
   SIGKILL) and two attempts; attempt 1 must print "resumed from .../epoch_E_step_S.pt at
   epoch E step S" with E > 0, E the last epoch attempt 0 saved (the newest checkpoint), and
   finish with the same final metrics line as the reference (the resumed job replays the same
   data order, masks and negatives, so on the CPU the numbers agree exactly).
"""
import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "..", "..", "examples", "pytorch")

# Program, the arguments of the test (smoke sizes, more epochs), the imports it needs, and the
# fields its final "done:" line must carry.
PROGRAMS = {
    "temporal_encoder": ("temporal_encoder_ddp.py",
                         ["--smoke", "--set", "training.num_epochs=8",
                          "--set", "data.num_samples=1200"],
                         "torch, transformers, tokenizers, yaml, numpy",
                         ["stage", "val_loss", "val_lm_loss", "val_token_acc"]),
    "protein_mae": ("protein_mae_ddp.py", ["--smoke", "--epochs", "8", "--batch_size", "4"],
                    "torch, numpy", ["val_loss", "val_acc", "baseline_acc"]),
    "gpt2rec": ("gpt2rec_ddp.py", ["--smoke", "--epochs", "8", "--batch_size", "128"],
                "torch, transformers, tokenizers, numpy",
                ["HR@10", "NDCG@10", "Recall@20", "NDCG@20", "test_HR@10", "test_NDCG@10",
                 "test_Recall@20", "test_NDCG@20"]),
}

TEE_PREFIX = re.compile(r"^\[[A-Za-z_]+[0-9]+\]:")
SAVED = re.compile(r"^saved (\S*epoch_(\d+)_step_(\d+)\.pt)")
RESUMED = re.compile(r"^resumed from (\S*epoch_(\d+)_step_(\d+)\.pt) at epoch (\d+) step (\d+)$")


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def interpreter(imports):
    py = os.environ.get("CTRUN_TORCH2_PYTHON") or os.path.expanduser("~/.venvs/torch2/bin/python")
    if not os.access(py, os.X_OK):
        print("SKIP: no Python at %s (scripts/test creates ~/.venvs/torch2; or set "
              "CTRUN_TORCH2_PYTHON)" % py)
        sys.exit(77)
    p = subprocess.run([py, "-c", "import %s" % imports], capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        print("SKIP: %s cannot import %s (%s); scripts/test installs them into "
              "~/.venvs/torch2" % (py, imports, last))
        sys.exit(77)
    return py


def child_with_local_rank(parent, local_rank):
    """The pid of the child process of parent whose environment has LOCAL_RANK=local_rank."""
    want = b"LOCAL_RANK=%d" % local_rank
    for task in glob.glob("/proc/%d/task/*/children" % parent):
        try:
            with open(task) as f:
                pids = [int(x) for x in f.read().split()]
        except OSError:
            continue
        for pid in pids:
            try:
                with open("/proc/%d/environ" % pid, "rb") as f:
                    if want in f.read().split(b"\0"):
                        return pid
            except OSError:
                pass
    return None


def run(ctrun, py, script, args, cwd, kill_rank1=False):
    """Runs the job; returns (exit status, [(seconds since start, line)], log_dir). With
    kill_rank1, SIGKILLs local rank 1 when the first epoch checkpoint is reported."""
    logs = os.path.join(cwd, "ctrun_logs")
    cmd = [ctrun, "--standalone", "--nproc_per_node=2", "--log_dir", logs, "--tee", "3",
           "--python", py]
    if kill_rank1:
        cmd += ["--max_restarts=2"]
    cmd += [script] + args
    print("$ (cd %s && %s)" % (cwd, " ".join(cmd)), flush=True)
    env = dict(os.environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env["CUDA_VISIBLE_DEVICES"] = ""  # CPU workers, even on a machine with GPUs
    t0 = time.monotonic()
    lines = []
    with subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as p:
        for line in p.stdout:
            # --tee prefixes each worker line with [ROLE LOCAL_RANK]:
            lines.append((time.monotonic() - t0, TEE_PREFIX.sub("", line.rstrip("\n"))))
            print("  %6.1f  %s" % (lines[-1][0], lines[-1][1]), flush=True)
            if kill_rank1 and SAVED.match(lines[-1][1]):
                kill_rank1 = False
                pid = child_with_local_rank(p.pid, 1)
                check(pid is not None, "no worker with LOCAL_RANK=1 under ctrun (pid %d)" % p.pid)
                os.kill(pid, signal.SIGKILL)
                print("# SIGKILL to local rank 1 (pid %d)" % pid, flush=True)
        rc = p.wait()
    return rc, lines, logs


def worker_lines(logs, attempt, local_rank=0):
    found = glob.glob(os.path.join(logs, "*", "attempt_%d" % attempt, str(local_rank),
                                   "stdout.log"))
    check(len(found) == 1, "attempt %d: expected one stdout.log of local rank %d under %s, "
          "found %d" % (attempt, local_rank, logs, len(found)))
    with open(found[0], encoding="utf-8", errors="replace") as f:
        return [x.rstrip("\n") for x in f]


def done_line(lines):
    d = [x for x in lines if x.startswith("done: ")]
    check(len(d) == 1, "expected one 'done:' line, got %d" % len(d))
    return d[0]


def metrics(line):
    return dict(kv.split("=", 1) for kv in line.split()[1:] if "=" in kv and
                not kv.startswith("wall="))


def window(lines):
    """(time of the first 'saved epoch_' line, time of the last epoch's line)."""
    saved = [t for t, x in lines if SAVED.match(x)]
    check(len(saved) >= 2, "fewer than two epoch checkpoints saved")
    return saved[0], saved[-1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    ap.add_argument("--program", required=True, choices=sorted(PROGRAMS))
    a = ap.parse_args()
    name, args, imports, fields = PROGRAMS[a.program]
    ctrun = os.path.abspath(a.ctrun)  # meson passes it relative to the build folder
    py = interpreter(imports)
    script = os.path.abspath(os.path.join(EXAMPLES, name))
    root = tempfile.mkdtemp(prefix="ct-example-%s." % a.program)
    try:
        ref_dir = os.path.join(root, "reference")
        os.makedirs(ref_dir)
        rc, ref, _ = run(ctrun, py, script, args, ref_dir)
        check(rc == 0, "reference run: ctrun exited %d" % rc)
        ref_done = done_line([x for _, x in ref])
        got = metrics(ref_done)
        for f in fields:
            check(f in got, "reference run: no %s= in %r" % (f, ref_done))
        window(ref)

        d = os.path.join(root, "killed")
        os.makedirs(d)
        rc, out, logs = run(ctrun, py, script, args, d, kill_rank1=True)
        check(rc == 0, "killed run: ctrun exited %d" % rc)
        reports = glob.glob(os.path.join(logs, "*", "report.json"))
        check(len(reports) == 1, "killed run: expected one report.json, found %d" % len(reports))
        with open(reports[0]) as f:
            report = json.load(f)
        first = worker_lines(logs, 0)
        saved0 = [int(m.group(2)) for m in map(SAVED.match, first) if m]
        check(report.get("attempts") == 2, "report.json: attempts %r, want 2" %
              report.get("attempts"))
        fails = report.get("failures") or []
        check(len(fails) == 1 and fails[0].get("rank") == 1 and
              "SIGKILL" in str(fails[0].get("cause")),
              "report.json: failures %r, want one SIGKILL of rank 1" % fails)
        second = worker_lines(logs, 1)
        res = [m for m in map(RESUMED.match, second) if m]
        check(len(res) == 1, "attempt 1 printed no 'resumed from ... at epoch E step S' "
              "line (it started from scratch?)")
        m = res[0]
        epoch, step = int(m.group(4)), int(m.group(5))
        check(epoch > 0 and step > 0, "resumed at epoch %d step %d" % (epoch, step))
        # Rank 0 may have renamed one more checkpoint into place before its stop, without
        # printing its line: the newest is the last one printed or the one after it.
        check(max(saved0) <= epoch <= max(saved0) + 1,
              "resumed at epoch %d, but attempt 0 had saved epoch %d (not the newest "
              "checkpoint)" % (epoch, max(saved0)))
        check((int(m.group(2)), int(m.group(3))) == (epoch, step),
              "resume line names %s but says epoch %d step %d" % (m.group(1), epoch, step))
        check(not any(x.startswith("epoch %d/" % epoch) for x in second),
              "attempt 1 trained epoch %d again" % epoch)
        fin = done_line(second)
        check(metrics(fin) == got, "final metrics differ from the uninterrupted run:\n"
              "  resumed:   %s\n  reference: %s" % (fin, ref_done))
        print("ok - %s: killed rank 1 after its first checkpoint, restarted, %s, finished with "
              "%s" % (a.program, m.group(0), fin), flush=True)
        return 0
    except Fail as e:
        print("FAIL: %s" % e, flush=True)
        return 1
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
