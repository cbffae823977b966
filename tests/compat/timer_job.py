"""timer_job.py - a worker for the FileTimer test: arms torch.distributed.elastic.timer's
FileTimerClient on TORCHELASTIC_TIMER_FILE and runs one step under expires(after=2,
scope="step"). Rank 1 overruns it (sleeps 60 s) in attempt 0; everyone else finishes in
0.2 s. Local rank 0 of attempt 0 first writes a line that is not JSON and a request for a pid
that is not a worker (pid 1) into the pipe: the agent must drop both and go on."""
import json
import os
import time

from torch.distributed.elastic.timer import FileTimerClient, configure, expires

path = os.environ["TORCHELASTIC_TIMER_FILE"]
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
if attempt == 0 and int(os.environ["LOCAL_RANK"]) == 0:
    with open(path, "w") as f:
        f.write("not json\n")
        f.write(json.dumps({"version": 1, "pid": 1, "scope_id": "x",
                            "expiration_time": time.time() + 0.1, "signal": 9}) + "\n")
configure(FileTimerClient(path))
print("rank %d attempt %d: step starts" % (rank, attempt), flush=True)
with expires(after=2, scope="step"):
    time.sleep(60 if rank == 1 and attempt == 0 else 0.2)
print("rank %d attempt %d: step done" % (rank, attempt), flush=True)
