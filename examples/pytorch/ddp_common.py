"""ddp_common.py - what the three PyTorch example programs share: joining the process group
from the torchrun variables (or running as one process without them), the device and backend
choice, rank-0 logging to stdout and train.log, TensorBoard, checkpoint files written
atomically and found again after a restart, and the exact sharding of validation sets.

It owns no model, no data and no training loop: those are in each program. It does not retry,
re-launch or watch anything either: restarting a failed job is the launcher's work (ctrun or
torchrun); a program only has to find its newest checkpoint when it starts again.
"""
import datetime
import faulthandler
import os
import re
import signal
import sys
import time

import torch
import torch.distributed as dist

CKPT_RE = re.compile(r"^epoch_(\d+)_step_(\d+)\.pt$")


class Ctx:
    """Where this process runs: its rank among world processes, its device and backend."""

    def __init__(self):
        self.rank = 0
        self.world = 1
        self.local_rank = 0
        self.distributed = False
        self.backend = None
        self.device = torch.device("cpu")
        self.attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0)

    @property
    def main(self):
        return self.rank == 0

    @property
    def local_main(self):
        """The first process of its node: prepares the node's local files (data caches)."""
        return self.local_rank == 0


def setup(require_launcher=False, cpu=False, timeout_s=1800):
    """Joins the process group when RANK and WORLD_SIZE are set (torchrun, ctrun), else runs as
    a single process. NCCL on the GPU of LOCAL_RANK when GPUs are visible, gloo on the CPU
    otherwise (or with cpu=True). require_launcher: the variables must be there (--ddp)."""
    c = Ctx()
    have_env = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    if require_launcher and not have_env:
        sys.exit("error: --ddp needs RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT; start the "
                 "program with ctrun or torchrun (they set them), or leave --ddp out to run "
                 "as one process")
    use_cuda = torch.cuda.is_available() and not cpu
    if have_env:
        c.rank = int(os.environ["RANK"])
        c.world = int(os.environ["WORLD_SIZE"])
        c.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if use_cuda:
        ndev = torch.cuda.device_count()
        if c.local_rank >= ndev:
            sys.exit("error: LOCAL_RANK %d but only %d GPU(s) visible; start at most %d "
                     "processes per node (--nproc_per_node)" % (c.local_rank, ndev, ndev))
        torch.cuda.set_device(c.local_rank)
        c.device = torch.device("cuda", c.local_rank)
    if have_env:
        c.backend = "nccl" if use_cuda and dist.is_nccl_available() else "gloo"
        kw = {"backend": c.backend, "timeout": datetime.timedelta(seconds=timeout_s)}
        if c.backend == "nccl":
            kw["device_id"] = c.device
        dist.init_process_group(**kw)
        c.distributed = True
    # Python stacks on a fatal signal; and on SIGUSR1, which ctrun sends to a worker it is about
    # to stop for silence.
    faulthandler.enable()
    if hasattr(signal, "SIGUSR1"):
        faulthandler.register(signal.SIGUSR1, all_threads=True)
    return c


def finish(c):
    """The end of a successful run: every rank reaches the barrier, the process group is
    destroyed, and the process exits 0 at once, without the interpreter's teardown (where
    library threads still alive at exit occasionally end the process with SIGABRT, which would
    count as a failed worker and a restart)."""
    if c.distributed:
        dist.barrier()
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def barrier(c):
    if c.distributed:
        dist.barrier()


def all_sum(c, values):
    """Sums a list of floats over all ranks (in float64); returns the list."""
    t = torch.tensor(values, dtype=torch.float64,
                     device=c.device if c.backend == "nccl" else "cpu")
    if c.distributed:
        dist.all_reduce(t)
    return t.cpu().tolist()


def broadcast_obj(c, obj):
    """Rank 0's obj on every rank."""
    if not c.distributed:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, device=c.device if c.backend == "nccl" else None)
    return box[0]


def real_positions(n_total, c, start, count):
    """DistributedSampler(shuffle=False, drop_last=False) pads the last round with copies of
    the first samples so every rank gets as many; position k of this rank is a real sample when
    rank + k*world < n_total. A 0/1 float64 tensor for positions [start, start+count)."""
    k = torch.arange(start, start + count, dtype=torch.int64)
    return ((c.rank + k * c.world) < n_total).to(torch.float64)


class Log:
    """Rank-0 lines on stdout and in DIR/train.log; other ranks print only warnings and errors
    (with their rank), on stderr."""

    def __init__(self, c, log_dir):
        self.c = c
        self.f = None
        if c.main and log_dir:
            os.makedirs(log_dir, exist_ok=True)
            self.f = open(os.path.join(log_dir, "train.log"), "a", encoding="utf-8")

    def __call__(self, msg):
        if not self.c.main:
            return
        line = "%s %s" % (time.strftime("%Y-%m-%d %H:%M:%S"), msg)
        print(msg, flush=True)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()

    def warn(self, msg, all_ranks=False):
        if self.c.main or all_ranks:
            who = "" if self.c.world == 1 else "[rank %d] " % self.c.rank
            print("%swarning: %s" % (who, msg), file=sys.stderr, flush=True)
            if self.f:
                self.f.write("%s warning: %s\n" % (time.strftime("%Y-%m-%d %H:%M:%S"), msg))
                self.f.flush()


def tensorboard(c, log_dir, log):
    """A SummaryWriter on rank 0 under log_dir/tensorboard, or None (other ranks, or no
    tensorboard package: then a warning)."""
    if not c.main:
        return None
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        log.warn("no TensorBoard logs (%s); pip install tensorboard" % e)
        return None
    return SummaryWriter(os.path.join(log_dir, "tensorboard"))


def describe(c):
    where = c.device.type if c.device.type == "cpu" else "%s (%s)" % (
        c.device, torch.cuda.get_device_name(c.device))
    return "world %d, backend %s, device %s, attempt %d, torch %s" % (
        c.world, c.backend or "none (one process)", where, c.attempt, torch.__version__)


# ---- checkpoints --------------------------------------------------------------------------

def ckpt_name(epoch, step):
    return "epoch_%d_step_%d.pt" % (epoch, step)


def list_checkpoints(d):
    """[(epoch, step, path)] of the epoch checkpoints in d, newest first."""
    out = []
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return out
    for n in names:
        m = CKPT_RE.match(n)
        if m:
            out.append((int(m.group(1)), int(m.group(2)), os.path.join(d, n)))
    out.sort(reverse=True)
    return out


def save_atomic(obj, path):
    """torch.save into a temporary file beside path, flushed to disk, then renamed over path:
    a kill at any moment leaves either the old file or the complete new one."""
    d = os.path.dirname(os.path.abspath(path))
    os.makedirs(d, exist_ok=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def load(path):
    return torch.load(path, map_location="cpu", weights_only=True)


def load_checkpoint(c, path, what="checkpoint"):
    """load(path), or exit with one line naming the file, the rank and the reason."""
    try:
        return load(path)
    except Exception as e:  # OSError, a truncated or foreign file (pickle, zip, RuntimeError)
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        sys.exit("error: rank %d cannot read %s %s: %s: %s%s" % (
            c.rank, what, path, type(e).__name__, first[:120],
            "; every node must see the checkpoint folder" if c.world > 1 else ""))


def choose_resume(c, resume, ckpt_dir, log):
    """Which checkpoint to start from, the same on every rank (rank 0 decides). resume: 'auto'
    (the newest epoch checkpoint in ckpt_dir), 'none' (from scratch), or a path; after a
    restart (TORCHELASTIC_RESTART_COUNT > 0) a newer checkpoint in ckpt_dir wins over the path,
    so that a restarted job does not go back to where the first attempt began."""
    choice = None
    if c.main:
        # Temporary files of a write that a kill interrupted (save_atomic) are of no use.
        for n in os.listdir(ckpt_dir) if os.path.isdir(ckpt_dir) else []:
            if re.search(r"\.pt\.tmp\.\d+$", n):
                os.unlink(os.path.join(ckpt_dir, n))
        newest = list_checkpoints(ckpt_dir)
        if resume == "none":
            choice = None
        elif resume == "auto":
            choice = newest[0][2] if newest else None
        else:
            if not os.path.isfile(resume):
                choice = "!missing"
            else:
                choice = resume
                m = CKPT_RE.match(os.path.basename(resume))
                if c.attempt > 0 and newest and m and \
                        (newest[0][0], newest[0][1]) > (int(m.group(1)), int(m.group(2))):
                    choice = newest[0][2]
    choice = broadcast_obj(c, choice)
    if choice == "!missing":
        sys.exit("error: --resume %s: no such file" % resume)
    if choice is None:
        log("no checkpoint to resume from in %s: starting from scratch" % ckpt_dir)
    return choice


def strip_module(state):
    """A state dict with DataParallel/DDP's 'module.' prefix removed where present."""
    if any(k.startswith("module.") for k in state):
        return {(k[7:] if k.startswith("module.") else k): v for k, v in state.items()}
    return state


def unwrap(model):
    return model.module if hasattr(model, "module") else model


def epoch_seed(seed, epoch, rank=0):
    return (seed * 1000003 + epoch * 7919 + rank * 104729) % (2 ** 63)


def warmup_cosine(warmup, total, floor=0.05):
    """Multiplier of the base learning rate at optimizer step s: linear warm-up, cosine decay
    to floor."""
    import math

    def f(s):
        if warmup > 0 and s < warmup:
            return (s + 1) / warmup
        if total <= warmup:
            return 1.0
        p = min(1.0, (s - warmup) / max(1, total - warmup))
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))
    return f
