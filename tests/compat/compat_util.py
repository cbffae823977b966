"""compat_util.py - what the compat tests share: the PyTorch 2.x interpreter they use, a check
that it can run a snippet, and a loopback port to give a job."""

import os
import socket
import subprocess


def torch2_python():
    """$CTRUN_TORCH2_PYTHON, else the virtual environment scripts/test creates."""
    return os.environ.get("CTRUN_TORCH2_PYTHON", os.path.expanduser("~/.venvs/torch2/bin/python"))


def python_can(py, code):
    """Whether interpreter py exists and runs code without an error."""
    return os.access(py, os.X_OK) and subprocess.run(
        [py, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def free_port():
    """A loopback port that was free a moment ago (bound to port 0, read, closed)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
