"""ctrun_standby.py - a standby Python interpreter for ctrun --warm_restart (ctrun_warm.h).

ctrun starts one per local rank as `<python> -u ctrun_standby.py` with the rank's worker
environment, a Unix seqpacket socket on the fd named by CTRUN_STANDBY_FD, its own pid in
CTRUN_STANDBY_AGENT and the --warm_preload modules in CTRUN_STANDBY_PRELOAD. It imports torch
(and torch._dynamo, which PyTorch 2.x's optimizers import at their first use) and those
modules, checks that CUDA is not initialised, says READY (or FAIL <reason>) and waits.

Each RUN request carries a worker: working directory, CPUs, `-m` or a script path, argv and the
complete environment, with its stdin (when the agent has one), stdout, stderr, heartbeat and
cgroup.procs descriptors over SCM_RIGHTS. A forked copy of the standby (made in advance, while
idle) reads it, forks the worker, sends "PID <n>" and exits, so the worker is re-parented to
ctrun (a child subreaper while it waits for the reply) and ctrun waits for it, signals its process group and reads its exit status as for a
worker it started itself. The worker waits until ctrun is its parent, arms its parent-death
signal, joins the attempt's cgroup, starts its own session, puts its descriptors on 0-3, restores
the signal handlers and mask the interpreter started with, takes the environment, working
directory, sys.argv and sys.path[0], and runs the script as `python -u` would: a new __main__
module executing the file (runpy.run_path for a folder or zip), or runpy's `-m` entry for a
module. Its exit is the interpreter's own
(SystemExit, an uncaught exception, atexit handlers). The standby itself is unchanged by a fork
and serves the next restart too.

Deliberately not here: deciding when to fork (ctrun does), output routing and supervision (ctrun
holds the other ends), anything CUDA (a standby that initialised it refuses to serve).
"""
import os
import signal
import socket
import sys


def _send(sock, text):
    try:
        sock.send(text.encode("utf-8", "surrogateescape"))
    except OSError:
        pass


def _startup_signals():
    handlers = {}
    for sig in signal.valid_signals():
        if sig in (signal.SIGKILL, signal.SIGSTOP):
            continue
        try:
            handlers[sig] = signal.getsignal(sig)
        except (ValueError, OSError):
            pass
    return handlers


def _preload(sock, modules):
    import importlib

    try:
        import torch
    except BaseException as e:  # noqa: BLE001 - any failure only means: no standby
        _send(sock, "FAIL import torch: %s: %s" % (type(e).__name__, e))
        return False
    # What PyTorch 2.x imports lazily at the first optimizer or torch.compile of nearly every
    # training program (about 2 s on a small CPU): imported here too when it exists; a failure
    # only leaves it to the worker.
    try:
        importlib.import_module("torch._dynamo")
    except Exception:  # noqa: BLE001
        pass
    for name in modules:
        try:
            importlib.import_module(name)
        except BaseException as e:  # noqa: BLE001
            _send(sock, "FAIL import %s: %s: %s" % (name, type(e).__name__, e))
            return False
    try:
        cuda_on = torch.cuda.is_initialized()
    except BaseException:  # noqa: BLE001
        cuda_on = False
    if cuda_on:
        _send(sock, "FAIL CUDA was initialised while importing %s; a forked worker could not use "
              "it" % (", ".join(["torch"] + modules)))
        return False
    return True


def _parse(msg):
    f = msg.split(b"\0")
    if len(f) < 8 or f[0] != b"RUN":
        raise ValueError("malformed request")
    req = {"agent": int(f[1]), "cwd": os.fsdecode(f[2]), "fds": f[3].decode(),
           "cpus": [int(c) for c in f[4].decode().split(",") if c], "mode": f[5].decode(),
           "target": os.fsdecode(f[6])}
    nargs = int(f[7])
    req["args"] = [os.fsdecode(a) for a in f[8:8 + nargs]]
    env = {}
    for kv in f[8 + nargs:]:
        if not kv:
            continue
        k, _, v = kv.partition(b"=")
        env[k] = v
    req["env"] = env
    return req


def _grandchild_setup(sock, req, fds, handlers):
    """The worker, before its script: see the file's opening comment."""
    import ctypes
    import fcntl
    import time

    sock.close()
    deadline = time.monotonic() + 10.0
    while os.getppid() != req["agent"]:
        if time.monotonic() > deadline:
            os._exit(127)
        time.sleep(0.0002)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    if os.getppid() != req["agent"]:
        os._exit(127)  # ctrun died before the death signal was armed
    names = req["fds"]
    byname = dict(zip(names, fds))
    if "c" in byname:
        try:
            os.write(byname["c"], b"0")
        except OSError:
            pass  # the worker stays in its process group only, as a cold one would
    os.setsid()
    if req["cpus"]:
        os.sched_setaffinity(0, req["cpus"])
    lifted = {k: fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for k, fd in byname.items()}
    for fd in fds:
        os.close(fd)
    targets = {"i": 0, "o": 1, "e": 2, "h": 3}
    for k, dst in targets.items():
        if k in lifted:
            os.dup2(lifted[k], dst, inheritable=True)
        elif dst in (0, 3):
            try:
                os.close(dst)
            except OSError:
                pass
    for fd in lifted.values():
        os.close(fd)
    if "i" not in lifted:
        sys.stdin = sys.__stdin__ = None
    for sig, h in handlers.items():
        try:
            if signal.getsignal(sig) is not h:
                signal.signal(sig, h)
        except (ValueError, OSError, TypeError):
            pass
    signal.pthread_sigmask(signal.SIG_SETMASK, [])
    os.environ.clear()
    for k, v in req["env"].items():
        os.environb[k] = v
    os.chdir(req["cwd"])
    if "numpy" in sys.modules:  # its global generator was seeded once, in the standby
        try:
            sys.modules["numpy"].random.seed()
        except Exception:  # noqa: BLE001
            pass


def serve():
    """Returns the request of the worker (in the worker), or None when the standby is done."""
    handlers = _startup_signals()
    fd = int(os.environ.pop("CTRUN_STANDBY_FD"))
    agent = int(os.environ.pop("CTRUN_STANDBY_AGENT"))
    preload = [m for m in os.environ.pop("CTRUN_STANDBY_PRELOAD", "").split(",") if m]
    sock = socket.socket(fileno=fd)
    if os.getppid() != agent:
        return None
    if not _preload(sock, preload):
        return None
    # What the imports changed in the handlers is undone in each worker.
    _send(sock, "READY")
    # A forked copy waits for the request, so that a restart costs one fork, not two; the
    # standby makes the next copy when this one has served (or died).
    while True:
        try:
            zygote = os.fork()
        except OSError:
            return None
        if zygote == 0:
            return _zygote(sock, handlers)
        while True:
            try:
                _, status = os.waitpid(zygote, 0)
                break
            except InterruptedError:
                continue
        if os.waitstatus_to_exitcode(status) == _ZYGOTE_AGENT_GONE:
            return None


_ZYGOTE_AGENT_GONE = 3


def _zygote(sock, handlers):
    """Serves one request: forks the worker, says its pid and exits (the worker is then
    re-parented to ctrun). Returns the request in the worker."""
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
        except InterruptedError:
            continue
        except OSError:
            os._exit(_ZYGOTE_AGENT_GONE)
        if not msg:
            os._exit(_ZYGOTE_AGENT_GONE)  # ctrun closed its end or died
        try:
            req = _parse(msg)
            if len(fds) != len(req["fds"]):
                raise ValueError("%d descriptors for %r" % (len(fds), req["fds"]))
        except (ValueError, IndexError) as e:
            for x in fds:
                os.close(x)
            _send(sock, "ERR %s" % e)
            continue
        try:
            pid = os.fork()
        except OSError as e:
            for x in fds:
                os.close(x)
            _send(sock, "ERR fork: %s" % e)
            continue
        if pid == 0:
            try:
                _grandchild_setup(sock, req, fds, handlers)
            except BaseException as e:  # noqa: BLE001
                try:
                    os.write(2, ("ctrun standby: worker set-up failed: %s\n" % e).encode())
                finally:
                    os._exit(127)
            return req
        _send(sock, "PID %d" % pid)
        os._exit(0)


def _run_script(path):
    """`python path` for a source file: a fresh __main__ module as the interpreter makes it."""
    import importlib.machinery
    import io
    import types

    if not os.path.isfile(path):
        import runpy  # a folder or zip with __main__.py

        runpy.run_path(path, run_name="__main__")
        return
    path = os.path.abspath(path)  # as the interpreter makes __file__ since Python 3.9
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__package__ = None
    main.__spec__ = None
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", path)
    main.__builtins__ = __builtins__
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def run(req):
    target = req["target"]
    sys.argv = [target] + req["args"]
    try:
        if req["mode"] == "m":
            import runpy

            sys.path[0] = os.getcwd()
            # What `python -m` itself calls: the module becomes __main__, argv[0] its file.
            runpy._run_module_as_main(target, alter_argv=True)
        else:
            sys.path[0] = os.path.dirname(os.path.realpath(target))
            _run_script(target)
    except (SystemExit, KeyboardInterrupt):
        raise  # the interpreter's own exit status (SIGINT's for KeyboardInterrupt)
    except BaseException as e:  # noqa: BLE001
        # The traceback from the script's frame on, as `python script` prints it, and exit 1.
        sys.excepthook(type(e), e, e.__traceback__.tb_next)
        sys.exit(1)


if __name__ == "__main__":
    _req = serve()
    if _req is None:
        sys.exit(0)
    del serve
    run(_req)
