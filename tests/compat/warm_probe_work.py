"""warm_probe_work.py - the actions of warm_probe.py (a module next to it, so that the script's
folder being sys.path[0] is exercised, and spawned DataLoader workers can import it)."""
import os
import signal
import sys
import time


class Squares:
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i * i


def loader_sum(method):
    import torch
    from torch.utils.data import DataLoader

    kw = {} if method is None else {"multiprocessing_context": method}
    dl = DataLoader(Squares(), batch_size=2, num_workers=2, **kw)
    return int(sum(int(b.sum()) for b in dl))


def gloo_sum():
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    dist.destroy_process_group()
    return float(t.item())


def wait_snapshots():
    """Until every worker of this attempt wrote its snapshot (a failing one must not have its
    peers stopped before they did)."""
    out, attempt = os.environ["WARM_OUT"], os.environ["TORCHELASTIC_RESTART_COUNT"]
    for _ in range(600):
        if all(os.path.exists(os.path.join(out, "snap_a%s_r%d.json" % (attempt, r)))
               for r in range(int(os.environ["WORLD_SIZE"]))):
            return
        time.sleep(0.1)


def do(what, write):
    if what in ("exit3", "sigkill", "raise"):
        wait_snapshots()
    if what.startswith("exit"):
        sys.exit(int(what[4:]))
    if what == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if what == "raise":
        from torch.distributed.elastic.multiprocessing.errors import record

        @record
        def boom():
            raise ValueError("warm boom from rank %s" % os.environ["RANK"])

        boom()
    if what == "wait_term":
        def on_term(sig, frame):
            write("term", {"pid": os.getpid()})
            sys.exit(0)

        signal.signal(signal.SIGTERM, on_term)
        time.sleep(120)
        sys.exit(9)
    if what == "work":
        write("work", {"fork": loader_sum("fork"), "spawn": loader_sum("spawn"),
                       "gloo": gloo_sum()})
    if what == "sleep":
        time.sleep(120)
