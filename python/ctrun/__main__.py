"""python -m ctrun ARGS: runs the ctrun executable that pip installed into this environment's
scripts folder (bin/, or the user scheme's with --user), with ARGS. It looks nowhere else."""
import os
import sys
import sysconfig


def main():
    tried = []
    for scheme in (None, os.name + "_user"):
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path(
                "scripts")
        except KeyError:
            continue
        exe = os.path.join(scripts, "ctrun")
        if os.access(exe, os.X_OK):
            os.execv(exe, [exe] + sys.argv[1:])
        tried.append(exe)
    sys.exit("ctrun: error: no ctrun executable installed beside this package (looked at %s)"
             % ", ".join(tried))


if __name__ == "__main__":
    main()
