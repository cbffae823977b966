"""warm_pkg.probe_mod - warm_probe.py run as `-m warm_pkg.probe_mod`."""
import os
import sys

sys.path.insert(1, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import warm_probe  # noqa: E402

warm_probe.__name__  # the module's own code runs its main only as __main__
if __name__ == "__main__":
    warm_probe.main()
