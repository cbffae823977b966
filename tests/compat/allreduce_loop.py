"""allreduce_loop.py - a gloo worker for the scale-down test: joins the group, prints
"start rank R world W restart K", all-reduces a small tensor every 0.15 s for SECONDS
(argv[1], default 4), checks every sum equals the world size, prints "done rank R world W".
It uses nothing of ctrun: torchrun's environment only."""
import os
import sys
import time

import torch
import torch.distributed as dist

seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
print("start rank %d world %d restart %s" % (rank, world, os.environ["TORCHELASTIC_RESTART_COUNT"]),
      flush=True)
t = torch.ones(4)
end = time.time() + seconds
while time.time() < end:
    dist.all_reduce(t)
    if int(t[0].item()) != world:
        print("bad sum %s in a world of %d" % (t[0].item(), world), flush=True)
        sys.exit(3)
    t.fill_(1)
    time.sleep(0.15)
print("done rank %d world %d" % (rank, world), flush=True)
dist.destroy_process_group()
