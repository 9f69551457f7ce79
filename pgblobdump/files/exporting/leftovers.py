"""An interrupted export's own partial files, removed by the run that resumes it.

A local put writes ``.pgblobdump-part-PID-N`` beside its final name (files/localobjects);
a kill -9 leaves the one in flight. Only parts of a process this export's journal names
(an earlier run of it, its run id ``TIME-PID``) that is no longer alive are removed, so
a part of another export or of a running process is never touched. Directories are
walked with descriptors (``os.fwalk``, no symbolic link followed). An S3 prefix has no
parts: an object appears whole or not at all.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from pgblobdump.files.keys import TOOL_PREFIX


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_parts(root: Path, run_ids: Iterable[str]) -> int:
    """Remove the parts under ``root`` of the earlier runs ``run_ids`` whose process is
    gone; returns how many."""
    pids = set()
    for run in run_ids:
        pid = int(run.rsplit("-", 1)[1])
        if pid != os.getpid() and not _alive(pid):
            pids.add(pid)
    if not pids:
        return 0
    alternatives = "|".join(str(p) for p in sorted(pids))
    pattern = re.compile(rf"{re.escape(TOOL_PREFIX)}-part-(?:{alternatives})-\d+")
    removed = 0
    for _dir, _dirs, files, dfd in os.fwalk(root, follow_symlinks=False):
        for name in files:
            if pattern.fullmatch(name):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name, dir_fd=dfd)
                    removed += 1
    return removed
