"""What a benchmark process leaves in its log when it is stopped during a long compile.

The GPU check compiles each backend in a background process with a time limit, and stops one that
overruns (SIGTERM, then SIGKILL). On the first H200 run every opara-inductor compile overran and
its log ended at "compiling": slow or hung, nobody could say. With this, opara logs each region's
compile as it ends (its logger "opara", python/opara/_regions.py), and SIGTERM writes every
thread's Python stack into the log before the process ends.
"""

import faulthandler
import logging
import signal
import sys


def log_compile_progress():
    """opara's compile progress on stderr, and the Python stacks on SIGTERM (the process still ends)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    logger = logging.getLogger("opara")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    # chain: after the stacks, SIGTERM's default action (the process ends, as the runner expects).
    faulthandler.register(signal.SIGTERM, file=sys.stderr, all_threads=True, chain=True)
