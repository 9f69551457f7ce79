"""The core's diagnostics for ``-v``: Python logging under the ``pgblobdump`` logger.

The core never prints: it logs phases with their timings, the server and the settings
that size its work, and the SQL statement classes it issues (``logging.INFO``; each
statement at ``DEBUG``). The CLI decides where that goes (stderr with ``-v``, nowhere by
default); a library user configures the ``pgblobdump`` logger as any other.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator

ROOT = "pgblobdump"
"""Every module's logger is ``logging.getLogger(__name__)``: a child of this one."""


def get(name: str) -> logging.Logger:
    """The logger of module ``name`` (a child of ROOT)."""
    return logging.getLogger(name if name.startswith(ROOT) else f"{ROOT}.{name}")


@contextlib.contextmanager
def phase(log: logging.Logger, what: str) -> Iterator[None]:
    """Log ``what`` when it begins and its duration when it ends (or fails)."""
    if not log.isEnabledFor(logging.INFO):
        yield
        return
    log.info("%s ...", what)
    t0 = time.perf_counter()
    ok = False
    try:
        yield
        ok = True
    finally:
        took = time.perf_counter() - t0
        log.info("%s: %s in %.3f s", what, "done" if ok else "stopped", took)
