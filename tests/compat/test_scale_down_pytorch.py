"""test_scale_down_pytorch.py - graceful scale-down with unmodified PyTorch 2.x gloo workers:
three ctrun agents (--rdzv_backend=c10d --nnodes=2:3 --max_restarts=0) with one worker each
(allreduce_loop.py, all-reducing every 0.15 s); SIGTERM to the third agent once every worker
runs. It must exit 143; the other two stop their workers at once and re-form in a world of 2
with TORCHELASTIC_RESTART_COUNT still 0 (with --max_restarts=0 a counted restart would end
the job), their workers finish, and both exit 0. Prints the time from the SIGTERM until both
survivors' workers have started again. Skips (77) without PyTorch 2.x at CTRUN_TORCH2_PYTHON
(default ~/.venvs/torch2/bin/python).

  test_scale_down_pytorch.py --ctrun PATH
"""
import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time

from compat_util import free_port, python_can, torch2_python

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "allreduce_loop.py")


def read(path):
    with open(path, errors="replace") as f:
        return f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctrun", required=True)
    args = ap.parse_args()
    py = torch2_python()
    if not python_can(py, "import torch, torch.distributed as d; assert d.is_gloo_available(); "
                      "assert int(torch.__version__.split('.')[0]) >= 2"):
        print("SKIP: no PyTorch 2.x with gloo at %s (set CTRUN_TORCH2_PYTHON)" % py)
        return 77
    port = free_port()
    tmp = tempfile.mkdtemp(prefix="scale_down_")
    agents, logs = [], []
    try:
        for i in range(3):
            log = os.path.join(tmp, "agent%d.log" % i)
            logs.append(log)
            with open(log, "w") as out:
                agents.append(subprocess.Popen(
                    [args.ctrun, "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port,
                     "--rdzv_id=scale_down", "--nnodes=2:3", "--max_restarts=0",
                     "--rdzv_conf=last_call_timeout=60", "--nproc_per_node=1",
                     "--log_dir=/dev/null", "--python", py, WORKER, "6"],
                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            if i == 0:
                time.sleep(0.5)  # the first agent hosts the store
        deadline = time.time() + 120
        while sum("start rank" in read(l) for l in logs) < 3:
            if time.time() > deadline or any(a.poll() is not None for a in agents):
                raise SystemExit("not every worker started:\n" + "\n".join(read(l) for l in logs))
            time.sleep(0.05)
        time.sleep(1.0)  # a few all-reduces in the world of 3
        t0 = time.time()
        agents[2].send_signal(signal.SIGTERM)
        while not all("world 2 restart 0" in read(logs[i]) for i in range(2)):
            if time.time() > deadline or any(agents[i].poll() is not None for i in range(2)):
                raise SystemExit("the survivors did not re-form:\n" + read(logs[0]) + read(logs[1]))
            time.sleep(0.005)
        took = time.time() - t0
        codes = [a.wait(timeout=120) for a in agents]
        text = [read(l) for l in logs]
        ok = codes == [0, 0, 143]
        for i in range(2):
            ok = ok and "left the job (SIGTERM); re-forming the job without it" in text[i]
            ok = ok and "done rank %d world 2" % i in text[i]
        if not ok:
            print("exit codes %s" % codes)
            for i in range(3):
                print("---- agent %d\n%s" % (i, text[i]))
            return 1
        print("# SIGTERM to one of three agents -> both survivors' workers started again in a "
              "world of 2: %.0f ms" % (took * 1e3))
        return 0
    finally:
        for a in agents:
            if a.poll() is None:
                os.killpg(a.pid, signal.SIGKILL)
                a.wait()


if __name__ == "__main__":
    sys.exit(main())
