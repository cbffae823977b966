#!/usr/bin/env python3
"""test_etcd_pytorch.py - the gloo DDP job (ddp_job.py) of two nodes with two workers each under
ctrun's c10d rendezvous and under --rdzv_backend=etcd-v3, against a real etcd.

    test_etcd_pytorch.py --ctrun EXE

PyTorch >= 2.2 (CTRUN_TORCH2_PYTHON, default ~/.venvs/torch2/bin/python) and etcd (CTRUN_ETCD,
else `etcd` on PATH; Debian's etcd-server) must be there; otherwise the test exits 77 (skip) with
the reason. etcd runs on two loopback ports below the ephemeral range, its data in a temporary
folder, and is stopped at the end.

Both runs must give every rank the same results (all_reduce, new_group, DDP weights) and the same
torchrun variables (RANK, GROUP_RANK, WORLD_SIZE, ...; MASTER_PORT is the port of each run's
workers' store, which with etcd-v3 group rank 0 hosts on a port the kernel picks). The etcd run
leaves no key of the job in etcd.
"""
import argparse
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_launcher_pytorch as tl  # noqa: E402


def etcd_binary():
    env = os.environ.get("CTRUN_ETCD")
    if env:
        return env
    return shutil.which("etcd")


def etcd_post(endpoint, path, body):
    req = urllib.request.Request("http://%s%s" % (endpoint, path), data=json.dumps(body).encode(),
                                 method="POST")
    with urllib.request.urlopen(req, timeout=5) as r:
        return json.load(r)


def etcd_start(root):
    exe = etcd_binary()
    if not exe or not os.access(exe, os.X_OK):
        print("SKIP: no etcd (Debian: apt-get install etcd-server, as scripts/bootstrap does; or "
              "set CTRUN_ETCD)")
        sys.exit(77)
    client, peer = tl.free_port(), tl.free_port()
    while peer == client:
        peer = tl.free_port()
    data = os.path.join(root, "etcd")
    log = open(os.path.join(root, "etcd.log"), "w")
    p = subprocess.Popen([exe, "--name", "m0", "--data-dir", data,
                          "--listen-client-urls", "http://127.0.0.1:%d" % client,
                          "--advertise-client-urls", "http://127.0.0.1:%d" % client,
                          "--listen-peer-urls", "http://127.0.0.1:%d" % peer,
                          "--initial-advertise-peer-urls", "http://127.0.0.1:%d" % peer,
                          "--initial-cluster", "m0=http://127.0.0.1:%d" % peer],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = "127.0.0.1:%d" % client
    deadline = time.time() + 30
    while True:
        try:
            with urllib.request.urlopen("http://%s/health" % endpoint, timeout=1) as r:
                if r.status == 200:
                    return p, endpoint
        except OSError:
            pass
        if p.poll() is not None or time.time() > deadline:
            p.kill()
            p.wait()
            raise tl.Fail("etcd did not start; see %s" % os.path.join(root, "etcd.log"))
        time.sleep(0.1)


def etcd_job_keys(endpoint, run_id):
    key = ("/ctrun/%s/" % run_id).encode()
    end = key[:-1] + bytes([key[-1] + 1])
    r = etcd_post(endpoint, "/v3/kv/range", {"key": base64.b64encode(key).decode(),
                                             "range_end": base64.b64encode(end).decode(),
                                             "count_only": True})
    return int(r.get("count", "0"))


def run_etcd_job(interp, ctrun, endpoint, root):
    out = tempfile.mkdtemp(prefix="etcd_2n_", dir=root)
    cmds = []
    for node in range(2):
        cmds.append([ctrun, "--python", interp, "--log_dir", os.path.join(out, "logs%d" % node),
                     "--nproc_per_node=2", "--max_restarts=0", "--nnodes=1:2",
                     "--rdzv_backend=etcd-v3", "--rdzv_id=compat", "--rdzv_endpoint=" + endpoint,
                     "--local_addr=127.0.0.1", "--rdzv_conf=last_call_timeout=30",
                     tl.SCRIPT, out, "-1"])
    for status, text in tl.run_nodes(cmds):
        tl.check(status == 0, "ctrun (etcd-v3) exited %d:\n%s" % (status, text[-6000:]))
    results = {}
    for name in os.listdir(out):
        if name.startswith("result.") and name.endswith(".json"):
            with open(os.path.join(out, name)) as f:
                r = json.load(f)
            results[r["rank"]] = r
    tl.check(sorted(results) == [0, 1, 2, 3], "etcd-v3: results of ranks %s" % sorted(results))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    args = ap.parse_args()
    interp, version = tl.probe("pt2")
    if not etcd_binary():
        print("SKIP: no etcd (Debian: apt-get install etcd-server, as scripts/bootstrap does; or "
              "set CTRUN_ETCD)")
        sys.exit(77)
    print("# PyTorch %s at %s" % (version, interp))
    root = tempfile.mkdtemp(prefix="ctrun_compat_etcd_")
    ok = False
    etcd = None
    try:
        etcd, endpoint = etcd_start(root)
        t0 = time.time()
        ref, _ = tl.run_job("ctrun", "pt2", interp, args.ctrun, 2, 2, 0, -1, root, "c10d")
        got = run_etcd_job(interp, args.ctrun, endpoint, root)
        for rank in range(4):
            a, b = ref[rank], got[rank]
            for key in ("all_reduce", "group_members", "group_all_reduce", "weights"):
                tl.check(a[key] == b[key], "rank %d: %s differs: c10d %r, etcd-v3 %r"
                         % (rank, key, a[key], b[key]))
            ea, eb = a["env"], b["env"]
            for var in tl.TORCHRUN_VARS:
                tl.check(ea.get(var) == eb.get(var), "rank %d: %s is %r under c10d, %r under "
                         "etcd-v3" % (rank, var, ea.get(var), eb.get(var)))
            tl.check(eb["GROUP_RANK"] == str(rank // 2) and eb["WORLD_SIZE"] == "4",
                     "rank %d: etcd-v3 variables %r" % (rank, {k: eb.get(k)
                                                               for k in tl.TORCHRUN_VARS}))
        ports = {got[r]["env"]["MASTER_PORT"] for r in got}
        tl.check(len(ports) == 1, "etcd-v3: workers got different MASTER_PORTs %s" % ports)
        tl.check(etcd_job_keys(endpoint, "compat") == 0, "etcd-v3: the job's keys are left")
        print("ok - two nodes of two workers: etcd-v3 gives the ranks, variables and results of "
              "c10d (%.0f s)" % (time.time() - t0))
        ok = True
    except tl.Fail as e:
        print("FAIL: %s" % e)
    finally:
        if etcd is not None:
            os.killpg(etcd.pid, signal.SIGKILL)
            etcd.wait()
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print("(outputs kept in %s)" % root)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
