"""ctrun: a torchrun-compatible elastic launcher (native executables; see `man ctrun`).

This package only lets `python -m ctrun` run the `ctrun` executable installed beside it.
"""
