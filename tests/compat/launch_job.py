"""launch_job.py - a training script written for python -m torch.distributed.launch.

It parses the guide's arguments and the local rank as an argument, the way such scripts do
(PyTorch >= 2.0's launch passes --local-rank=N, 1.x's --local_rank=N; scripts accept both), joins
the gloo process group from the launcher's environment, checks that the argument agrees with
LOCAL_RANK, does one all_reduce and writes what it saw to <train_dir>/rank<r>.json.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
parser.add_argument("--dataset", required=True)
parser.add_argument("--train_dir", required=True)
parser.add_argument("--batch_size", type=int, default=128)
parser.add_argument("--use_amp", action="store_true")
parser.add_argument("--multi_gpu", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
os.makedirs(args.train_dir, exist_ok=True)
with open(os.path.join(args.train_dir, "rank%d.json" % rank), "w") as f:
    json.dump({"local_rank_arg": args.local_rank, "LOCAL_RANK": int(os.environ["LOCAL_RANK"]),
               "world": dist.get_world_size(), "sum": t.item(), "batch_size": args.batch_size,
               "use_amp": args.use_amp, "multi_gpu": args.multi_gpu,
               "MASTER_PORT": os.environ["MASTER_PORT"]}, f)
dist.destroy_process_group()
