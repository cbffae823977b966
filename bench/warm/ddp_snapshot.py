"""ddp_snapshot.py - a small DDP training program with a snapshot every epoch, for
warm_bench.py: the shape of PyTorch's ddp-tutorial-series multi-node example (a Trainer that
loads a snapshot when there is one, trains a model on a DistributedSampler's share of a
synthetic dataset, and saves a snapshot at the end of every epoch), written for this benchmark.

Prints, with CLOCK_MONOTONIC time stamps (the benchmark's clock):
  START rank=R pid=P attempt=A t=T
  RESUMED rank=R epoch=E t=T          (after loading the snapshot)
  STEP rank=R epoch=E t=T             (the first training step of this process)
  EPOCH rank=R epoch=E t=T            (after each epoch's snapshot)
"""
import argparse
import os
import time

T0 = time.monotonic()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402
from torch.utils.data.distributed import DistributedSampler  # noqa: E402


def say(what, **kv):
    print("%s %s t=%.6f" % (what, " ".join("%s=%s" % i for i in kv.items()), time.monotonic()),
          flush=True)


class Trainer:
    def __init__(self, model, loader, opt, snapshot):
        self.rank = int(os.environ["RANK"])
        self.model = model
        self.loader = loader
        self.opt = opt
        self.snapshot = snapshot
        self.epoch = 0
        if os.path.exists(snapshot):
            state = torch.load(snapshot, map_location="cpu")
            self.model.load_state_dict(state["MODEL"])
            self.epoch = state["EPOCHS_RUN"]
            say("RESUMED", rank=self.rank, epoch=self.epoch)
        self.model = DDP(self.model)
        self.stepped = False

    def _epoch(self, epoch, step_s):
        self.loader.sampler.set_epoch(epoch)
        for x, y in self.loader:
            self.opt.zero_grad()
            loss = F.mse_loss(self.model(x), y)
            loss.backward()
            self.opt.step()
            if not self.stepped:
                self.stepped = True
                say("STEP", rank=self.rank, epoch=epoch)
            time.sleep(step_s)

    def _save(self, epoch):
        if self.rank != 0:
            return
        tmp = self.snapshot + ".tmp"
        torch.save({"MODEL": self.model.module.state_dict(), "EPOCHS_RUN": epoch + 1}, tmp)
        os.replace(tmp, self.snapshot)

    def train(self, epochs, step_s):
        for epoch in range(self.epoch, epochs):
            self._epoch(epoch, step_s)
            self._save(epoch)
            say("EPOCH", rank=self.rank, epoch=epoch)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=200)
    ap.add_argument("--step_s", type=float, default=0.01)
    ap.add_argument("--snapshot", required=True)
    args = ap.parse_args()
    say("START", rank=os.environ["RANK"], pid=os.getpid(),
        attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), startup=round(T0, 6))
    dist.init_process_group("gloo")
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(512, 32, generator=g), torch.randn(512, 1, generator=g))
    loader = DataLoader(data, batch_size=32, sampler=DistributedSampler(data))
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    Trainer(model, loader, opt, args.snapshot).train(args.epochs, args.step_s)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
