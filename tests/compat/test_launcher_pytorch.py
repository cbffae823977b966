#!/usr/bin/env python3
"""test_launcher_pytorch.py - the same gloo DDP job (ddp_job.py) under torchrun and under ctrun.

    test_launcher_pytorch.py --torch pt13|pt2 --ctrun EXE

pt13 is Debian's PyTorch 1.13 (CTRUN_TORCH13_PYTHON, default /usr/bin/python3), pt2 a PyTorch
>= 2.2 (CTRUN_TORCH2_PYTHON, default ~/.venvs/torch2/bin/python); the test exits 77 (skip) with
the reason when that interpreter cannot import torch. The reference launcher is that PyTorch's
own `python -m torch.distributed.run`, with --monitor_interval 0.1 and underscore spellings; 1.13
also gets --redirects 9:0 --tee 9:0, without which it crashes on Python 3.11
(docs/torchrun-compatibility.md §0). ctrun runs the script with --python set to the same
interpreter.

Cases:
  1. one node, two workers, rank 1 crashes in attempt 0 (--max_restarts 1): both launchers
     restart the job once and finish with exit 0; the workers of the last attempt see the same
     torchrun variables and compute the same results (all_reduce, new_group, DDP weights).
     With PyTorch >= 2, torchrun's own restart is not reliable (its restarted workers can read
     the failed attempt's keys from the store it keeps), so its reference run has no crash,
     and ctrun's restarted job must give the same variables (up to the attempt) and results.
  2. two static nodes on 127.0.0.1, one worker each, no crash: the same comparison across
     nodes.
  3. ctrun only, two nodes with rank 1 (node 1) crashing in attempt 0: ctrun restarts both nodes
     together and the results equal case 2's. (torchrun's static backend restarts only the
     failing node, whose peers then wait in their collectives until a timeout, so it has no
     counterpart here; see docs/torchrun-compatibility.md §3.1.)
  4. two static nodes with two workers each under both launchers (same variables and results),
     then ctrun alone with the dynamic c10d rendezvous (--nnodes=1:2, both agents on
     127.0.0.1): the round closes at the maximum, ranks follow join order and the results equal
     the static run's.
  5. ctrun only: two workers get 1, 4, 5 and 8 MiB values five times each from the agent's
     store with PyTorch's own TCPStore client (5 s timeout); the job ends with exit 0.
Variables that differ by design (the run's port and paths are compared by shape, not value):
ctrun also sets CTRUN_HEARTBEAT_FD, CTRUN_JOB_TAG, both NCCL async-error variables, and
TORCHELASTIC_SIGNALS_TO_HANDLE (as torchrun >= 2.6 does).
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "ddp_job.py")

TORCHRUN_VARS = ["RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "ROLE_NAME", "LOCAL_WORLD_SIZE",
                 "WORLD_SIZE", "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                 "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                 "TORCHELASTIC_USE_AGENT_STORE", "OMP_NUM_THREADS", "CTRUN_COMPAT_MARK"]
CTRUN_EXTRAS = {"CTRUN_HEARTBEAT_FD", "CTRUN_JOB_TAG", "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                "NCCL_ASYNC_ERROR_HANDLING", "TORCHELASTIC_SIGNALS_TO_HANDLE"}


class Fail(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Fail(what)


def interpreter(flavour):
    if flavour == "pt13":
        return os.environ.get("CTRUN_TORCH13_PYTHON", "/usr/bin/python3"), "CTRUN_TORCH13_PYTHON"
    return (os.environ.get("CTRUN_TORCH2_PYTHON", os.path.expanduser("~/.venvs/torch2/bin/python")),
            "CTRUN_TORCH2_PYTHON")


def probe(flavour):
    interp, var = interpreter(flavour)
    if not os.access(interp, os.X_OK):
        print("SKIP: %s: no interpreter at %s (set %s)" % (flavour, interp, var))
        sys.exit(77)
    p = subprocess.run([interp, "-c", "import torch, torch.distributed as d; "
                        "print(torch.__version__, d.is_gloo_available())"],
                       capture_output=True, text=True)
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["?"])[-1]
        print("SKIP: %s cannot import torch (%s); install it (scripts/bootstrap --torch for 1.13) "
              "or point %s at one" % (interp, last, var))
        sys.exit(77)
    version, gloo = p.stdout.split()
    mm = tuple(int(x) for x in version.split("+")[0].split(".")[:2])
    if flavour == "pt2" and mm < (2, 2):
        print("SKIP: %s has PyTorch %s; this flavour needs >= 2.2" % (interp, version))
        sys.exit(77)
    if flavour == "pt13" and mm >= (2, 0):
        print("SKIP: %s has PyTorch %s; this flavour is the 1.13 reference" % (interp, version))
        sys.exit(77)
    if gloo != "True":
        print("SKIP: %s has no gloo backend" % interp)
        sys.exit(77)
    return interp, version


def free_port():
    """A port below the kernel's ephemeral range, bindable now (see tests/launcher/ctrun_e2e.h:
    an ephemeral port can be taken by any outgoing connection before the launcher binds it)."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rnd = int.from_bytes(os.urandom(4), "little")
    for i in range(1000):
        port = 10000 + (rnd + 7919 * i) % max(1, low - 10000)
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        try:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            s.bind(("::", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise Fail("no free port")


def base_env():
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith("PET_") or k.startswith("TORCHELASTIC_") or k in
                   ("LOGLEVEL", "CT_LOG_LEVEL", "OMP_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT",
                    "RANK", "WORLD_SIZE", "LOCAL_RANK", "CTRUN_PYTHON", "PYTHON_EXEC"))}
    env["CTRUN_COMPAT_MARK"] = "kept"
    return env


def command(launcher, flavour, interp, ctrun, nnodes, node_rank, nproc, port, restarts, out,
            crash, backend="static"):
    flags = ["--nproc_per_node=%d" % nproc, "--max_restarts=%d" % restarts]
    if backend == "static":
        flags += ["--nnodes=%d" % nnodes, "--node_rank=%d" % node_rank, "--master_addr=127.0.0.1",
                  "--master_port=%d" % port]
    else:
        flags += ["--nnodes=1:%d" % nnodes, "--rdzv_backend=c10d", "--rdzv_id=compat",
                  "--rdzv_endpoint=127.0.0.1:%d" % port, "--rdzv_conf=last_call_timeout=30"]
    logs = os.path.join(out, "logs%d" % node_rank)
    if launcher == "torchrun":
        head = [interp, "-m", "torch.distributed.run", "--monitor_interval", "0.1", "--log_dir",
                logs]
        if flavour == "pt13":
            head += ["--redirects", "9:0", "--tee", "9:0"]
    else:
        head = [ctrun, "--python", interp, "--log_dir", logs]
    return head + flags + [SCRIPT, out, str(crash)]


def run_nodes(cmds, timeout=300):
    """Runs the launchers of all nodes at once; returns their (exit status, output)."""
    procs = [subprocess.Popen(c, env=base_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, start_new_session=True)
             for c in cmds]
    results = []
    deadline = time.time() + timeout
    for p in procs:
        try:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
        except subprocess.TimeoutExpired:
            for q in procs:
                try:
                    os.killpg(q.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            out, _ = p.communicate()
            raise Fail("launcher timed out: %s\n%s" % (" ".join(p.args), out[-4000:]))
        results.append((p.returncode, out))
    for p in procs:
        try:  # nothing of the job may outlive its launcher
            os.killpg(p.pid, 0)
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return results


def run_job(launcher, flavour, interp, ctrun, nnodes, nproc, restarts, crash, root,
            backend="static"):
    # torchrun is the reference, not what is tested: a run of it that crashes by itself (its
    # gloo workers have aborted with "terminate called without an active exception" on a loaded
    # machine) is run once more; ctrun gets one run
    for tries_left in range(1 if launcher == "ctrun" else 2, 0, -1):
        out = tempfile.mkdtemp(prefix="%s_%dn_" % (launcher, nnodes), dir=root)
        port = free_port()
        cmds = [command(launcher, flavour, interp, ctrun, nnodes, r, nproc, port, restarts, out,
                        crash, backend)
                for r in range(nnodes)]
        failed = [(status, text) for status, text in run_nodes(cmds) if status != 0]
        if not failed or tries_left == 1:
            break
        print("# %s (the reference) exited %d; running it once more:\n%s"
              % (launcher, failed[0][0], failed[0][1][-2000:]))
    for status, text in failed:
        check(False, "%s exited %d:\n%s" % (launcher, status, text[-6000:]))
    world = nnodes * nproc
    results = {}
    for name in os.listdir(out):
        if name.startswith("result.") and name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                r = json.load(f)
            results.setdefault(r["rank"], {})[r["attempt"]] = r
    check(sorted(results) == list(range(world)), "%s: results of ranks %s, expected 0..%d"
          % (launcher, sorted(results), world - 1))
    final = {rank: by_attempt[max(by_attempt)] for rank, by_attempt in results.items()}
    want_attempt = 1 if crash >= 0 else 0
    for rank, r in final.items():
        check(r["attempt"] == want_attempt, "%s rank %d finished in attempt %d, expected %d"
              % (launcher, rank, r["attempt"], want_attempt))
        check(r["world"] == world, "%s rank %d saw world %d" % (launcher, rank, r["world"]))
    return final, port


def launcher_added(env):
    return {k for k in env if k not in base_env()}


def compare(ref, ref_port, got, got_port, what):
    """Same results and torchrun variables; when the two ran different attempts (a restart on
    one side only), the attempt-dependent ones are checked against each side's own attempt."""
    for rank in ref:
        a, b = ref[rank], got[rank]
        for key in ("all_reduce", "group_members", "group_all_reduce", "weights"):
            check(a[key] == b[key], "%s rank %d: %s differs: torchrun %r, ctrun %r"
                  % (what, rank, key, a[key], b[key]))
        ea, eb = a["env"], b["env"]
        for var in TORCHRUN_VARS:
            if var == "TORCHELASTIC_RESTART_COUNT":
                check(ea.get(var) == str(a["attempt"]) and eb.get(var) == str(b["attempt"]),
                      "%s rank %d: %s is %r/%r in attempts %d/%d" % (what, rank, var, ea.get(var),
                                                                    eb.get(var), a["attempt"],
                                                                    b["attempt"]))
                continue
            check(ea.get(var) == eb.get(var), "%s rank %d: %s is %r under torchrun, %r under ctrun"
                  % (what, rank, var, ea.get(var), eb.get(var)))
        check(ea.get("MASTER_PORT") == str(ref_port) and eb.get("MASTER_PORT") == str(got_port),
              "%s rank %d: MASTER_PORT %r/%r" % (what, rank, ea.get("MASTER_PORT"),
                                                 eb.get("MASTER_PORT")))
        for name, e, k in (("torchrun", ea, a["attempt"]), ("ctrun", eb, b["attempt"])):
            tail = "attempt_%d/%s/error.json" % (k, e["LOCAL_RANK"])
            check(e.get("TORCHELASTIC_ERROR_FILE", "").endswith(tail),
                  "%s rank %d: %s's TORCHELASTIC_ERROR_FILE %r does not end in %s"
                  % (what, rank, name, e.get("TORCHELASTIC_ERROR_FILE"), tail))
        added_ref, added_got = launcher_added(ea), launcher_added(eb)
        missing = added_ref - added_got - {"TORCHELASTIC_SIGNALS_TO_HANDLE"}
        extra = added_got - added_ref - CTRUN_EXTRAS
        check(not missing, "%s rank %d: torchrun sets %s, ctrun does not"
              % (what, rank, sorted(missing)))
        check(not extra, "%s rank %d: ctrun sets %s, torchrun does not" % (what, rank, sorted(extra)))


BIG_VALUES = r"""
import datetime, os, sys, torch, torch.distributed as d
kw = {"wait_for_workers": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
st = d.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=False,
                timeout=datetime.timedelta(seconds=5), **kw)
rank = int(os.environ["RANK"])
for mib in (1, 4, 5, 8):
    v = bytes([65 + mib]) * (mib << 20)
    if rank == 0:
        st.set("big%d" % mib, v)
    for i in range(5):
        assert st.get("big%d" % mib) == v, (mib, i)
print("rank %d got every value" % rank, flush=True)
"""


def run_big_values(flavour, interp, ctrun, root):
    """A ctrun job whose two workers get 1, 4, 5 and 8 MiB values five times each from the
    agent's store, with PyTorch's own client (5 s timeout)."""
    script = os.path.join(root, "big_values.py")
    with open(script, "w") as f:
        f.write(BIG_VALUES)
    cmd = [ctrun, "--python", interp, "--log_dir", os.path.join(root, "big_logs"),
           "--nnodes=1", "--nproc_per_node=2", "--master_port=%d" % free_port(), script]
    [(status, text)] = run_nodes([cmd], timeout=120)
    check(status == 0, "big values: ctrun exited %d:\n%s" % (status, text[-6000:]))
    for rank in (0, 1):
        check("rank %d got every value" % rank in text, "big values, rank %d:\n%s"
              % (rank, text[-6000:]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--torch", choices=["pt13", "pt2"], required=True)
    ap.add_argument("--ctrun", required=True)
    args = ap.parse_args()
    interp, version = probe(args.torch)
    print("# PyTorch %s at %s" % (version, interp))
    root = tempfile.mkdtemp(prefix="ctrun_compat_launch_")
    ok = False
    try:
        t0 = time.time()
        # PyTorch >= 2 workers take no per-attempt key prefix, and torchrun (2.15 here) keeps
        # the agent store of the failed attempt for the restart (static always; c10d shares
        # one store across rounds), so its restarted workers can read the failed attempt's gloo
        # addresses and fail: observed every time with static and intermittently with c10d.
        # There the reference runs without the crash, and ctrun's restarted job must match it.
        ref_crash = 1 if args.torch == "pt13" else -1
        ref1, p1 = run_job("torchrun", args.torch, interp, args.ctrun, 1, 2, 1, ref_crash, root)
        got1, q1 = run_job("ctrun", args.torch, interp, args.ctrun, 1, 2, 1, 1, root)
        compare(ref1, p1, got1, q1, "one node, crash in attempt 0")
        print("ok - one node, two workers, crash and restart (torchrun %s; %.0f s)"
              % ("restarted too" if ref_crash >= 0 else "without the crash", time.time() - t0))

        t0 = time.time()
        ref2, p2 = run_job("torchrun", args.torch, interp, args.ctrun, 2, 1, 0, -1, root)
        got2, q2 = run_job("ctrun", args.torch, interp, args.ctrun, 2, 1, 0, -1, root)
        compare(ref2, p2, got2, q2, "two nodes")
        print("ok - two static nodes (%.0f s)" % (time.time() - t0))

        t0 = time.time()
        got3, _ = run_job("ctrun", args.torch, interp, args.ctrun, 2, 1, 1, 1, root)
        for rank in got3:
            for key in ("all_reduce", "group_all_reduce", "weights"):
                check(got3[rank][key] == got2[rank][key],
                      "two nodes after a job-wide restart, rank %d: %s differs" % (rank, key))
            check(got3[rank]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1", "restart count")
        print("ok - ctrun: two nodes restart together after a crash on node 1 (%.0f s)"
              % (time.time() - t0))

        t0 = time.time()
        ref4, p4 = run_job("torchrun", args.torch, interp, args.ctrun, 2, 2, 0, -1, root)
        got4, q4 = run_job("ctrun", args.torch, interp, args.ctrun, 2, 2, 0, -1, root)
        compare(ref4, p4, got4, q4, "two nodes of two workers")
        dyn, _ = run_job("ctrun", args.torch, interp, args.ctrun, 2, 2, 0, -1, root, "c10d")
        for rank in dyn:
            e = dyn[rank]["env"]
            for key in ("all_reduce", "group_all_reduce", "weights"):
                check(dyn[rank][key] == got4[rank][key],
                      "c10d, rank %d: %s differs from the static run" % (rank, key))
            check(e["WORLD_SIZE"] == "4" and e["GROUP_WORLD_SIZE"] == "2"
                  and e["LOCAL_WORLD_SIZE"] == "2" and e["GROUP_RANK"] == str(rank // 2)
                  and e["TORCHELASTIC_RUN_ID"] == "compat" and e["MASTER_ADDR"] == "127.0.0.1",
                  "c10d, rank %d: variables %r" % (rank, {k: e.get(k) for k in TORCHRUN_VARS}))
        print("ok - two nodes of two workers: static against torchrun, dynamic c10d (%.0f s)"
              % (time.time() - t0))

        t0 = time.time()
        run_big_values(args.torch, interp, args.ctrun, root)
        print("ok - ctrun: workers get 1-8 MiB values from the agent's store (%.0f s)"
              % (time.time() - t0))
        ok = True
    except Fail as e:
        print("FAIL: %s" % e)
    finally:
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print("(outputs kept in %s)" % root)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
