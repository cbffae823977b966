#!/usr/bin/env python3
"""rdzv_bench_torch.py - the reference for bench/rdzv_bench.c: N agents joining PyTorch's own
dynamic rendezvous (DynamicRendezvousHandler over C10dRendezvousBackend, on a TCPStore server),
as torchrun's agents do.

    /usr/bin/python3 bench/rdzv_bench_torch.py [--agents 16,64] [--timeout 300]

The TCPStore server runs in a child process (so its CPU time can be read from /proc); the N
agents are threads of this process, each with its own TCPStore client and handler (min_nodes=1,
max_nodes=N, so the round completes when the N-th agent has joined, as in rdzv_bench.c).
Reported: rendezvous = first join to the moment every agent has its rank; store CPU = the
server process's CPU time over that interval. The agents share one Python interpreter (the GIL)
and PyTorch's join loop sleeps about 1 s between syncs while it waits, so this is torchrun's
algorithm at its best on one machine, not a model of N separate hosts (on the 2-core dev machine
256 agents did not finish within a 300 s join timeout). Not a test.
"""
import argparse
import logging
import os
import subprocess
import sys
import threading
import time
from datetime import timedelta

SERVER = r"""
import sys, time
from datetime import timedelta
from torch.distributed import TCPStore
s = TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=600), wait_for_workers=False)
print(s.port, flush=True)
sys.stdin.read()
"""


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(n, timeout):
    from torch.distributed import TCPStore
    from torch.distributed.elastic.rendezvous import RendezvousParameters
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler

    server = subprocess.Popen([sys.executable, "-c", SERVER], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        port = int(server.stdout.readline())
        handlers = []
        for _ in range(n):
            store = TCPStore("127.0.0.1", port, 1, False, timeout=timedelta(seconds=timeout))
            backend = C10dRendezvousBackend(store, "bench")
            params = RendezvousParameters(backend="c10d", endpoint="127.0.0.1:%d" % port,
                                          run_id="bench", min_nodes=1, max_nodes=n,
                                          join_timeout=str(timeout), last_call_timeout="600")
            handlers.append(create_handler(store, backend, params))
        ranks = [None] * n
        errors = []
        start = threading.Barrier(n + 1)

        def agent(i):
            start.wait()
            try:
                r = handlers[i].next_rendezvous()
                ranks[i] = r[1] if isinstance(r, tuple) else r.rank
            except Exception as e:  # reported below
                errors.append("%s: %s" % (type(e).__name__, e))

        threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        cpu0 = cpu_seconds(server.pid)
        t0 = time.monotonic()
        start.wait()
        for t in threads:
            t.join()
        took = time.monotonic() - t0
        cpu1 = cpu_seconds(server.pid)
        if errors:
            return None, "%d agents failed, e.g. %s" % (len(errors), errors[0])
        if sorted(ranks) != list(range(n)):
            return None, "ranks are not 0..%d" % (n - 1)
        return (took * 1000.0, (cpu1 - cpu0) * 1000.0), None
    finally:
        server.stdin.close()
        server.kill()
        server.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="16,64")
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    # The handlers' keep-alive threads complain once the server is gone; that is the end of a run.
    logging.getLogger("torch.distributed.elastic").setLevel(logging.CRITICAL)
    try:
        import torch
    except ImportError:
        print("# skipped: this Python has no torch (use /usr/bin/python3 or ~/.venvs/torch2)")
        return 0
    print("# rdzv_bench_torch: PyTorch %s DynamicRendezvousHandler + C10dRendezvousBackend, "
          "N agents as threads, TCPStore server in its own process" % torch.__version__)
    print("# %6s %14s %14s" % ("agents", "rendezvous_ms", "store_cpu_ms"))
    for tok in args.agents.split(","):
        n = int(tok)
        res, err = run(n, args.timeout)
        if err:
            print("# %6d failed: %s" % (n, err))
        else:
            print("  %6d %14.1f %14.1f" % (n, res[0], res[1]))
        sys.stdout.flush()
    # The handlers' keep-alive threads are daemons; leave without waiting for them.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
