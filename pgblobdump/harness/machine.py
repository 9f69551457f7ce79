"""Facts about the machine a measurement ran on, kept with every results file."""

from __future__ import annotations

import os
import platform
import socket
from typing import Any

from pgblobdump import __version__


def _first_match(path: str, key: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                name, sep, value = line.partition(":")
                if sep and name.strip() == key:
                    return value.strip()
    except OSError:
        return None
    return None


def machine_info() -> dict[str, Any]:
    """Facts that explain why another machine's figures differ."""
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "cpu": _first_match("/proc/cpuinfo", "model name") or platform.processor(),
        "cpus": os.cpu_count(),
        "memory": _first_match("/proc/meminfo", "MemTotal"),
        "python": platform.python_version(),
        "pgblobdump": __version__,
    }
