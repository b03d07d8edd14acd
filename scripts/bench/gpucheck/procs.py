"""What every part of gpu-check shares about paths and processes (no import of the other modules,
so none of them imports another in a circle): the bench and project folders, the deadline's
exception, and the child-process set-up (own process group, SIGKILL with gpu-check) and kill."""
import ctypes
import os
import signal

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(BENCH))


class DeadlineHit(Exception):
    """No time is left before the deadline for the next command."""


def _child_setup():
    """In the child: its own process group (killed whole on a timeout) and SIGKILL when gpu-check
    dies, however it dies."""
    os.setsid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _kill_group(p):
    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
