"""Files written all or nothing, with OS errors as ours."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path

from pgblobdump.errors import UsageError, from_os_error


def refuse_input(output: Path, *inputs: Path, option: str = "-o") -> None:
    """UsageError when ``output`` is one of ``inputs`` or lies inside one (a directory):
    writing there would destroy what is being read. ``option`` names ``output``."""
    try:
        out = output.resolve()
    except OSError:
        return
    for given in inputs:
        src = given.resolve()
        same = out.exists() and src.exists() and os.path.samefile(out, src)
        if same or src in out.parents:
            raise UsageError(
                f"{option} {output} would overwrite the input {given}; choose another file"
            )


def check_writable(output: Path) -> None:
    """Before the work whose result ``write_atomically`` writes to ``output`` at its end:
    FileError when it could not (no such folder, one not writable, ``output`` a folder),
    proved by making and removing a file beside it."""
    if output.is_symlink():
        output = output.resolve()
    if output.exists() and not output.is_file():
        if output.is_dir():
            raise from_os_error(IsADirectoryError(21, "Is a directory", str(output)), "write")
        return  # a device or FIFO, written in place
    probe = output.with_name(f".{output.name}.{os.getpid()}.probe")
    try:
        with probe.open("xb"):
            pass
        probe.unlink()
    except OSError as e:
        e.filename = str(output)
        raise from_os_error(e, "write") from e


def write_atomically(output: Path, pieces: Iterable[bytes | memoryview]) -> None:
    """Write ``pieces`` to ``output`` all or nothing: into a hidden file beside it, renamed
    over it at the end, removed on any failure (an error, Ctrl-C, SIGTERM). A device or FIFO
    (/dev/stdout, a symlink to one) is written in place: renaming over it would replace
    the device; a symlink to a file has the file it names replaced."""
    if output.is_symlink():
        output = output.resolve()
    if output.exists() and not output.is_file():
        try:
            with output.open("wb") as f:
                for piece in pieces:
                    f.write(piece)
        except OSError as e:
            e.filename = e.filename or str(output)
            raise from_os_error(e, "write") from e
        return
    tmp = output.with_name(f".{output.name}.{os.getpid()}.part")
    try:
        with tmp.open("xb") as f:
            for piece in pieces:
                f.write(piece)
        tmp.replace(output)
    except OSError as e:
        e.filename = str(output)
        raise from_os_error(e, "write") from e
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
