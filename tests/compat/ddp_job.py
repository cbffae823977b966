"""ddp_job.py OUT_DIR CRASH_RANK - a small gloo DDP job for the launcher compatibility tests.

Run by torchrun and by ctrun with the same arguments. Each worker writes
OUT_DIR/result.<rank>.<attempt>.json: its environment as the launcher gave it (read before
torch is imported), and what the job computed: an all_reduce, a barrier, a new_group collective
and a few DDP steps of a linear model from a fixed seed (bit-identical on any launcher that
gives the same ranks and world size). With CRASH_RANK >= 0, that rank exits with status 3
right after the first all_reduce in attempt 0 (TORCHELASTIC_RESTART_COUNT 0), while its peers
are inside the next collective; the launcher must stop them and restart the whole job, and
attempt 1 must find a clean store.
"""
import json
import os
import sys

ENV_AT_START = dict(os.environ)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def main():
    out_dir, crash_rank = sys.argv[1], int(sys.argv[2])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()

    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    if attempt == 0 and rank == crash_rank:
        sys.stdout.flush()
        os._exit(3)
    dist.barrier()

    # A group of the first and the last rank (all ranks must call new_group).
    members = sorted({0, world - 1})
    group = dist.new_group(ranks=members)
    sub = torch.tensor([float(10 * (rank + 1))])
    if rank in members:
        dist.all_reduce(sub, group=group)

    torch.manual_seed(1234)
    model = torch.nn.Linear(4, 1)
    ddp = DDP(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(99 + rank)
    for _ in range(3):
        x = torch.randn(8, 4, generator=g)
        y = x.sum(dim=1, keepdim=True)
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    weights = [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]
    dist.barrier()

    result = {
        "env": ENV_AT_START,
        "rank": rank,
        "world": world,
        "attempt": attempt,
        "all_reduce": float(t.item()),
        "group_members": members,
        "group_all_reduce": float(sub.item()) if rank in members else None,
        "weights": weights,
    }
    path = os.path.join(out_dir, "result.%d.%d.json" % (rank, attempt))
    with open(path + ".tmp", "w") as f:
        json.dump(result, f)
    os.rename(path + ".tmp", path)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
