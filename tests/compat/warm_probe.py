"""warm_probe.py - a worker for test_warm_restart.py: writes what it sees as a process (argv,
sys.path, __main__, environment, descriptors, signal state, session) to $WARM_OUT, then does
what $WARM_ACT asks of this attempt and rank."""
import json
import os
import re
import signal
import sys
import time


def _r(x):
    """repr without object addresses, which differ between any two processes."""
    return re.sub(r" at 0x[0-9a-f]+", "", repr(x))


def snapshot():
    fds = {}
    for fd in range(0, 8):
        try:
            st = os.fstat(fd)
            fds[fd] = "chr" if (st.st_mode & 0o170000) == 0o020000 else (
                "fifo" if (st.st_mode & 0o170000) == 0o010000 else "other")
        except OSError:
            fds[fd] = None
    main = sys.modules["__main__"]
    sigs = {}
    for s in signal.valid_signals():
        if s in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            sigs[int(s)] = _r(signal.getsignal(s))
        except (ValueError, OSError):
            pass
    return {
        "argv": sys.argv, "path": sys.path, "name": main.__name__,
        "file": getattr(main, "__file__", None), "package": _r(getattr(main, "__package__", "-")),
        "spec": _r(getattr(main, "__spec__", "-")), "cached": _r(getattr(main, "__cached__", "-")),
        "loader": type(getattr(main, "__loader__", None)).__name__,
        "cwd": os.getcwd(), "env": dict(os.environ), "fds": fds,
        "stdin_none": sys.stdin is None, "sigs": sigs,
        "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
        "session_leader": os.getsid(0) == os.getpid(), "pgid_is_pid": os.getpgid(0) == os.getpid(),
        "ppid": os.getppid(), "pid": os.getpid(), "flags": repr(sys.flags),
        "stdout_line_buffering": sys.stdout.line_buffering,
        "stdout_write_through": getattr(sys.stdout, "write_through", None),
        "executable": sys.executable, "affinity": sorted(os.sched_getaffinity(0)),
    }


def write(tag, data):
    out = os.environ["WARM_OUT"]
    path = os.path.join(out, "%s_a%s_r%s.json" % (tag, os.environ["TORCHELASTIC_RESTART_COUNT"],
                                                  os.environ["RANK"]))
    with open(path + ".tmp", "w") as f:
        json.dump(data, f)
    os.rename(path + ".tmp", path)


def main():
    write("snap", snapshot())
    act = json.loads(os.environ.get("WARM_ACT", "{}"))
    key = "%s/%s" % (os.environ["TORCHELASTIC_RESTART_COUNT"], os.environ["RANK"])
    what = act.get(key, "")
    import warm_probe_work
    warm_probe_work.do(what, write)


if __name__ == "__main__":
    main()
