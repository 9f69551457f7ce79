"""The exact command lines each contender runs: dump, restore, list.

One function per step, dispatching on the contender's tool, so a new contender (the
packed format) is one more branch here and nothing else in the runner changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pgblobdump.compare.matrix import FORMATS, PG_DUMP, Contender, RestoreMode
from pgblobdump.errors import UsageError
from pgblobdump.pg import toolchain
from pgblobdump.pg.target import split_password
from pgblobdump.pg.toolchain import Toolchain

PG_NEEDS = ("pg_dump", "pg_restore")


def find_toolchains(majors: Sequence[int], explicit: Sequence[Path] = ()) -> dict[int, Toolchain]:
    """The client tools of each major; ToolchainError names the install command if missing."""
    return {m: toolchain.find(m, PG_NEEDS, explicit) for m in majors}


def _bare(conninfo: str) -> str:
    # Never a password on a command line, even from a caller that forgot child_connection.
    return split_password(conninfo)[0]


def archive_name(contender: Contender, count: int, repeat: int) -> str:
    suffix = "" if contender.is_directory else ".dump"
    return f"{contender.key}-{count}-r{repeat}{suffix}"


def dump_argv(contender: Contender, tc: Toolchain, conninfo: str, out: Path) -> list[str]:
    """The dump command: as the seed ran it, default compression, output to ``out``."""
    if contender.tool == PG_DUMP:
        return [
            str(tc.tool("pg_dump")),
            f"-F{FORMATS[contender.format]}",
            "-f", str(out),
            "-d", _bare(conninfo),
        ]  # fmt: skip
    raise UsageError(f"no dump command for contender tool {contender.tool!r}")


def restore_argv(
    contender: Contender, tc: Toolchain, archive: Path, conninfo: str, mode: RestoreMode
) -> list[str]:
    """The restore command into an existing empty database at ``conninfo``."""
    if contender.tool == PG_DUMP:
        argv = [str(tc.tool("pg_restore")), "-d", _bare(conninfo), "--exit-on-error"]
        if mode.jobs > 1:
            argv += ["-j", str(mode.jobs)]
        if mode.transaction_size:
            argv += ["--transaction-size", str(mode.transaction_size)]
        return [*argv, str(archive)]
    raise UsageError(f"no restore command for contender tool {contender.tool!r}")


def list_argv(contender: Contender, tc: Toolchain, archive: Path) -> list[str]:
    """``pg_restore -l`` of the same major (an older one may not read the archive)."""
    if contender.tool == PG_DUMP:
        return [str(tc.tool("pg_restore")), "-l", str(archive)]
    raise UsageError(f"no listing command for contender tool {contender.tool!r}")
