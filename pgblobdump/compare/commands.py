"""The exact command lines each contender runs: dump, restore, list.

Each contender tool is a small strategy object (``Commands``): pg_dump/pg_restore of a
major, or pgblobdump's packed archive; the runner asks ``commands_for(contender)``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from pgblobdump.compare.matrix import FORMATS, PACKED, PG_DUMP, Contender, RestoreMode
from pgblobdump.errors import UsageError
from pgblobdump.pg.target import split_password
from pgblobdump.servers import toolchain
from pgblobdump.servers.toolchain import Toolchain

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


class Commands(Protocol):
    """One contender tool's command lines (a strategy: the runner never branches on it)."""

    def dump(self, contender: Contender, tc: Toolchain, conninfo: str, out: Path) -> list[str]:
        """Dump the source at ``conninfo`` into ``out``, default settings."""
        ...

    def restore(self, contender: Contender, tc: Toolchain, archive: Path, conninfo: str,
                mode: RestoreMode) -> list[str]:  # fmt: skip
        """Restore ``archive`` into the existing empty database at ``conninfo``."""
        ...

    def listing(self, contender: Contender, tc: Toolchain, archive: Path) -> list[str] | None:
        """The command listing the archive's TOC entries, None when it has none."""
        ...


class PgDumpCommands:
    """pg_dump -Fc/-Fd as the seed ran it; pg_restore with the mode's -j/--transaction-size."""

    def dump(self, contender: Contender, tc: Toolchain, conninfo: str, out: Path) -> list[str]:
        return [
            str(tc.tool("pg_dump")),
            f"-F{FORMATS[contender.format]}",
            "-f", str(out),
            "-d", _bare(conninfo),
        ]  # fmt: skip

    def restore(self, contender: Contender, tc: Toolchain, archive: Path, conninfo: str,
                mode: RestoreMode) -> list[str]:  # fmt: skip
        argv = [str(tc.tool("pg_restore")), "-d", _bare(conninfo), "--exit-on-error"]
        if mode.jobs > 1:
            argv += ["-j", str(mode.jobs)]
        if mode.transaction_size:
            argv += ["--transaction-size", str(mode.transaction_size)]
        return [*argv, str(archive)]

    def listing(self, contender: Contender, tc: Toolchain, archive: Path) -> list[str] | None:
        """``pg_restore -l`` of the same major (an older one may not read the archive)."""
        return [str(tc.tool("pg_restore")), "-l", str(archive)]


class PackedCommands:
    """``pgblobdump dump`` / ``restore`` of this very installation (the same Python)."""

    def dump(self, contender: Contender, tc: Toolchain, conninfo: str, out: Path) -> list[str]:
        return [*_self(), "dump", "-d", _bare(conninfo), "-o", str(out), "--json"]

    def restore(self, contender: Contender, tc: Toolchain, archive: Path, conninfo: str,
                mode: RestoreMode) -> list[str]:  # fmt: skip
        return [*_self(), "restore", str(archive), "-d", _bare(conninfo), "--json"]

    def listing(self, contender: Contender, tc: Toolchain, archive: Path) -> list[str] | None:
        return None  # no TOC: a manifest, an index and volumes


COMMANDS: dict[str, Commands] = {PG_DUMP: PgDumpCommands(), PACKED: PackedCommands()}


def _self() -> list[str]:
    return [sys.executable, "-m", "pgblobdump"]


def commands_for(contender: Contender) -> Commands:
    try:
        return COMMANDS[contender.tool]
    except KeyError:
        raise UsageError(f"no commands for contender tool {contender.tool!r}") from None


def dump_argv(contender: Contender, tc: Toolchain, conninfo: str, out: Path) -> list[str]:
    """The dump command: default settings, output to ``out``."""
    return commands_for(contender).dump(contender, tc, conninfo, out)


def restore_argv(
    contender: Contender, tc: Toolchain, archive: Path, conninfo: str, mode: RestoreMode
) -> list[str]:
    """The restore command into an existing empty database at ``conninfo``."""
    return commands_for(contender).restore(contender, tc, archive, conninfo, mode)


def list_argv(contender: Contender, tc: Toolchain, archive: Path) -> list[str] | None:
    """The TOC listing command, None for an archive without a TOC (packed)."""
    return commands_for(contender).listing(contender, tc, archive)
