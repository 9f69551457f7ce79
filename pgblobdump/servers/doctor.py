"""What this machine offers pgblobdump: PostgreSQL majors, their builds, GNU time."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from pgblobdump import proc
from pgblobdump.errors import ServerError
from pgblobdump.servers import toolchain
from pgblobdump.servers.runas import server_identity

if TYPE_CHECKING:
    from pgblobdump.pg.wal.ready import WalReadiness

EXPECTED_MAJORS = (16, 17, 18)
"""The majors compare and the tests use; doctor says how to get any that is missing."""

GNU_TIME = Path("/usr/bin/time")
GNU_TIME_HINT = "apt-get install time"


@dataclass(frozen=True)
class FoundInstall:
    """One installation and what its build can do."""

    major: int
    version: str
    source: str
    bin_dir: Path
    server: bool
    client: bool
    compression: tuple[str, ...]
    preferred: bool


@dataclass(frozen=True)
class Missing:
    """Something pgblobdump would use that is absent, with the command that brings it."""

    what: str
    install: str


@dataclass(frozen=True)
class DoctorReport:
    installs: tuple[FoundInstall, ...]
    gnu_time: Path | None
    server_user: str
    missing: tuple[Missing, ...]
    server: str | None = None
    """The server ``doctor -d`` was pointed at (None: no connection option given)."""
    wal_summaries: WalReadiness | None = None
    """Whether that server can find changes through WAL summaries (pg/wal/ready.py);
    advice only: doctor's exit code does not depend on it."""


def build_compression(bin_dir: Path) -> tuple[str, ...]:
    """Compression the build was configured with, from ``pg_config --configure``."""
    pg_config = bin_dir / "pg_config"
    if not pg_config.is_file():
        return ()
    answer = proc.probe([pg_config, "--configure"])
    if answer is None:
        return ()
    flags = answer.stdout
    found = [] if "--without-zlib" in flags else ["gzip"]
    found += [name for name in ("lz4", "zstd") if f"--with-{name}" in flags]
    return tuple(found)


def gnu_time() -> Path | None:
    """/usr/bin/time when it is GNU time (the compare command needs its ``-f``)."""
    if not GNU_TIME.is_file():
        return None
    out = proc.probe([GNU_TIME, "--version"], timeout=10)
    if out is None:
        return None
    return GNU_TIME if "GNU" in (out.stdout + out.stderr) else None


def diagnose(explicit: Sequence[Path] = ()) -> DoctorReport:
    installs: list[FoundInstall] = []
    for tcs in toolchain.by_major(explicit).values():
        for i, tc in enumerate(tcs):
            installs.append(
                FoundInstall(
                    tc.major,
                    tc.version,
                    tc.source,
                    tc.bin_dir,
                    tc.has_server,
                    tc.has_client,
                    build_compression(tc.bin_dir),
                    i == 0,
                )
            )
    missing = []
    for major in EXPECTED_MAJORS:
        have = [i for i in installs if i.major == major]
        if not any(i.server and i.client for i in have):
            missing.append(
                Missing(
                    f"PostgreSQL {major} server and client tools", toolchain.INSTALL_HINTS[major]
                )
            )
    time_path = gnu_time()
    if time_path is None:
        missing.append(Missing("GNU time (/usr/bin/time)", GNU_TIME_HINT))
    try:
        user = server_identity().name
    except ServerError as e:
        user = f"none: {e}"
    return DoctorReport(tuple(installs), time_path, user, tuple(missing))
