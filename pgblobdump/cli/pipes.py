"""stdout whose reader went away (``| head``, a consumer that died)."""

from __future__ import annotations

import os
import sys


def silence_stdout() -> None:
    """Point stdout at /dev/null once its reader went away, so that Python's flush at
    exit does not complain of a broken pipe."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
