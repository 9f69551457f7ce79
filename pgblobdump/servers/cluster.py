"""A throwaway PostgreSQL cluster of a chosen major: initdb, pg_ctl start, stop.

Use as a context manager (``with EmbeddedCluster(16) as c: c.conninfo()``) or, from the
``server`` command, start it and leave it running, to stop it later by its data directory.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from pgblobdump import signals
from pgblobdump.errors import ServerError, UsageError, from_os_error
from pgblobdump.servers import toolchain
from pgblobdump.servers.runas import RunAs, reachable_bin_dir, server_identity

SUPERUSER = "postgres"

LAPTOP_WAL = "1GB"
"""``max_wal_size`` of an embedded cluster: PostgreSQL's own default. Between checkpoints
a cluster keeps up to this much WAL on disk, so a `server start` cluster stays
laptop-sized; a benchmark raises it (``BENCHMARK_WAL``)."""

BENCHMARK_WAL: Mapping[str, str] = {"max_wal_size": "8GB"}
"""What a benchmark's cluster adds to ``BENCHMARK_SETTINGS``: room for 8 GB of WAL, so no
checkpoint forced by WAL volume falls inside a timed run (with the 30 min
checkpoint_timeout, none does), at the price of up to 8 GB more on disk."""

WAL_SEGMENTS_MIN = 2 * 16 * 1024**2
"""The smallest max_wal_size the server takes: two 16 MiB WAL segments."""

BENCHMARK_SETTINGS: Mapping[str, str] = {
    # A throwaway cluster: durability buys nothing and costs most of the write time.
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "wal_level": "minimal",
    "max_wal_senders": "0",
    "max_wal_size": LAPTOP_WAL,
    "checkpoint_timeout": "30min",
    "shared_buffers": "256MB",
    "maintenance_work_mem": "256MB",
    "autovacuum": "off",
    # Keep the server's default lock table (max_locks_per_transaction = 64): LO work must
    # succeed at defaults, so tests here prove it does.
    "max_connections": "50",
    "listen_addresses": "'127.0.0.1'",
    "logging_collector": "off",
    "log_min_messages": "warning",
}
"""postgresql.conf settings for LO work on a disposable cluster: fast, not durable, with
WAL sized for a laptop (benchmarks add ``BENCHMARK_WAL``)."""

_SOCKET_PATH_MAX = 100  # sun_path is 108 bytes; ".s.PGSQL.NNNNN" and a NUL go after the dir

LOG_LINES_QUOTED = 4
"""Server log lines an error quotes when the server does not start."""
_LOG_PREFIX_RE = re.compile(r"^.*?\b(LOG|FATAL|PANIC|ERROR|WARNING|HINT|DETAIL):\s+")
"""The ``log_line_prefix`` (time, pid) before a message's level, which the quote drops."""
_LOG_NOISE = ("starting PostgreSQL", "database system is shut down")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` of 127.0.0.1 now: nobody listens there.
    SO_REUSEADDR as PostgreSQL sets it, so a closed connection's TIME_WAIT is no obstacle."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def wal_setting(size: int) -> str:
    """``max_wal_size`` for ``size`` bytes, in the server's units (GB or MB, 1024-based,
    rounded down to a MB); UsageError below two WAL segments."""
    if size < WAL_SEGMENTS_MIN:
        raise UsageError(
            f"--max-wal-size {size:,} bytes is below the server's least, 32MiB (two WAL segments)"
        )
    return f"{size // 1024**3}GB" if size % 1024**3 == 0 else f"{size // 1024**2}MB"


def default_base_dir() -> Path:
    """Where ``pgblobdump server`` keeps named clusters.

    Under a private home the server user could not reach the data directory, so root
    uses a world-traversable folder under /var/tmp.
    """
    env = os.environ.get("PGBLOBDUMP_HOME")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/tmp/pgblobdump-root")
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "pgblobdump"


@dataclass(frozen=True)
class ClusterInfo:
    """How to reach a running cluster; ``port`` and ``socket_dir`` are as configured.

    ``moved_from``: the port the cluster had before the start that returned this, when
    another process held it then (the cluster runs on ``port`` instead, and keeps it)."""

    major: int
    version: str
    datadir: Path
    port: int
    socket_dir: Path
    running: bool
    moved_from: int | None = None

    def conninfo(self, dbname: str = "postgres", tcp: bool = False) -> str:
        """A libpq connection string; over the private socket unless ``tcp``."""
        host = "127.0.0.1" if tcp else str(self.socket_dir)
        return f"host={host} port={self.port} user={SUPERUSER} dbname={dbname}"

    def url(self, dbname: str = "postgres") -> str:
        """A ``postgresql://`` URL over TCP loopback, for tools that want one."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"


class EmbeddedCluster:
    """A cluster in ``datadir`` (a fresh temporary one if None), run by a chosen toolchain.

    A temporary cluster is removed on exit; a named one is stopped but kept unless
    ``remove=True``. Starting a data directory that already holds a cluster reuses it.
    """

    def __init__(
        self,
        major: int = 16,
        datadir: Path | None = None,
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        tc: toolchain.Toolchain | None = None,
        remove: bool | None = None,
    ) -> None:
        if port is not None and not 1 <= port <= 65535:
            raise UsageError(f"port {port} is not a TCP port (1 to 65535)")
        self.tc = tc or toolchain.find(major, toolchain.SERVER_TOOLS)
        self.who: RunAs = server_identity()
        self._tmp: Path | None = None
        if datadir is None:
            self._tmp = Path(tempfile.mkdtemp(prefix="pgbd-"))
            self._tmp.chmod(0o755)  # the server user must traverse it
            datadir = self._tmp / "data"
        self.datadir = Path(datadir).absolute()
        self.remove = self._tmp is not None if remove is None else remove
        self.port = port
        self.settings = dict(BENCHMARK_SETTINGS)
        self.settings.update(settings or {})
        self._bin: Path | None = None

    # -- paths ----------------------------------------------------------------------
    @property
    def socket_dir(self) -> Path:
        return self.datadir

    @property
    def logfile(self) -> Path:
        return self.datadir / "pgblobdump-server.log"

    def _tool(self, name: str) -> str:
        if self._bin is None:
            self._bin = reachable_bin_dir(self.tc.bin_dir, self.who)
        return str(self._bin / name)

    def _run(self, args: list[str], what: str, timeout: float = 300) -> str:
        # ServerError when it cannot start or times out (its process group stopped first).
        proc = self.who.run(args, timeout, env={**os.environ, "LC_ALL": "C"}, what=what)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()
            detail = tail[-1] if tail else f"exit status {proc.returncode}"
            raise ServerError(f"{what} failed: {detail}")
        return proc.stdout

    # -- lifecycle -------------------------------------------------------------------
    @property
    def initialised(self) -> bool:
        return (self.datadir / "PG_VERSION").is_file()

    def init(self) -> None:
        """Run initdb and write the benchmark settings, unless already done."""
        if self.initialised:
            found = (self.datadir / "PG_VERSION").read_text().strip()
            if found != str(self.tc.major):
                raise UsageError(
                    f"{self.datadir} holds a PostgreSQL {found} cluster, not {self.tc.major}"
                )
            return
        if len(str(self.socket_dir)) > _SOCKET_PATH_MAX:
            raise UsageError(
                f"data directory path is too long for a unix socket (max {_SOCKET_PATH_MAX}"
                f" characters): {self.datadir}"
            )
        if self.datadir.exists() and any(self.datadir.iterdir()):
            raise UsageError(f"{self.datadir} exists and is not empty")
        try:
            self.datadir.mkdir(parents=True, exist_ok=True)
            self.who.chown(self.datadir)
            self.datadir.chmod(0o700)
        except OSError as e:
            raise from_os_error(e, "create the data directory") from e
        self._run(
            [
                self._tool("initdb"),
                "-D", str(self.datadir),
                "-U", SUPERUSER,
                "--auth=trust",
                "-E", "UTF8",
                "--locale=C",
                "--no-sync",
            ],
            f"initdb of PostgreSQL {self.tc.version} in {self.datadir}",
        )  # fmt: skip
        conf = self.datadir / "postgresql.auto.conf"
        lines = [f"{k} = {v}" for k, v in self.settings.items()]
        with conf.open("a") as f:
            f.write("# pgblobdump benchmark settings\n" + "\n".join(lines) + "\n")

    def configured(self, name: str) -> str | None:
        """``name``'s value in postgresql.auto.conf (the last one set), or None."""
        conf = self.datadir / "postgresql.auto.conf"
        found = None
        if conf.is_file():
            for line in conf.read_text().splitlines():
                key, _, value = line.partition("=")
                if key.strip() == name:
                    found = value.strip().strip("'")
        return found

    def _configured_port(self) -> int | None:
        port = self.configured("port")
        return None if port is None else int(port)

    def configure(self, settings: Mapping[str, str]) -> None:
        """Set ``settings`` (reloadable ones) in an initialised cluster, replacing what it
        had; a running server rereads its configuration."""
        for key, value in settings.items():
            self._set(key, value)
            self.settings[key] = value
        if settings and self.status().running:
            self._run(
                [self._tool("pg_ctl"), "-D", str(self.datadir), "reload"],
                f"reloading the configuration of {self.datadir}",
            )

    def _set(self, key: str, value: str) -> None:
        """Set ``key`` in postgresql.auto.conf, replacing an earlier value of it."""
        conf = self.datadir / "postgresql.auto.conf"
        lines = [
            line for line in conf.read_text().splitlines() if line.partition("=")[0].strip() != key
        ]
        conf.write_text("\n".join([*lines, f"{key} = '{value}'"]) + "\n")

    def _log_tail(self) -> list[str]:
        """The last lines the server logged in its latest start, without the time and pid
        prefix or the start and shut-down lines: why it did not start, to quote (the log
        itself may be removed with the cluster)."""
        try:
            lines = self.logfile.read_text(errors="replace").splitlines()[-200:]
        except OSError:
            return []
        starts = [i for i, line in enumerate(lines) if "starting PostgreSQL" in line]
        if starts:
            lines = lines[starts[-1] :]
        quoted = []
        for line in lines:
            text = _LOG_PREFIX_RE.sub(
                lambda m: "" if m.group(1) == "LOG" else f"{m.group(1)}: ", line
            ).strip()
            if text and not any(noise in text for noise in _LOG_NOISE):
                quoted.append(text if len(text) <= 300 else text[:297] + "...")
        return quoted[-LOG_LINES_QUOTED:]

    def start(self) -> ClusterInfo:
        """Initialise if needed, start, wait until ready. The port is the chosen one, else
        the one the cluster had before (when it is free: else ``moved_from`` says so), else
        a free one.

        A cluster this call initialised and could not start is removed again.
        """
        created = not self.initialised
        self.init()
        try:
            # Only a kept cluster keeps its log: otherwise the error quotes it instead.
            return self._start(log_kept=not created and not self.remove)
        except ServerError as e:
            if created and self._tmp is None:
                shutil.rmtree(self.datadir, ignore_errors=True)
                raise ServerError(f"{e}; removed the new cluster {self.datadir}") from e
            raise

    def _start(self, log_kept: bool) -> ClusterInfo:
        if self.status().running:
            return self.status()
        # A cluster started before keeps its port, so its connection strings stay good.
        before = None if self.port else self._configured_port()
        # A free port can be taken between choosing and binding it: then choose again.
        attempts = 1 if self.port else 5
        last: ServerError | None = None
        for attempt in range(attempts):
            if self.port:
                port = self.port
            elif attempt == 0 and before is not None and port_free(before):
                port = before
            else:
                port = free_port()
            self._set("port", str(port))
            self._set("unix_socket_directories", str(self.socket_dir))
            try:
                self._run(
                    [
                        self._tool("pg_ctl"),
                        "-D", str(self.datadir),
                        "-l", str(self.logfile),
                        "-w", "-t", "120",
                        "start",
                    ],
                    f"starting PostgreSQL {self.tc.version} on port {port}",
                )  # fmt: skip
                moved = before if before is not None and before != port else None
                return dataclasses.replace(self.status(), moved_from=moved)
            except ServerError as e:
                tail = self._log_tail()
                said = f"; the server logged: {' / '.join(tail)}" if tail else ""
                where = f" (log: {self.logfile})" if log_kept else ""
                what = f"starting PostgreSQL {self.tc.version} on port {port} failed"
                last = ServerError(f"{what}{said}{where}" if tail else f"{e}{where}")
                if not any("could not bind" in t or "already in use" in t for t in tail):
                    break
        assert last is not None
        raise last

    def status(self) -> ClusterInfo:
        running = False
        if self.initialised:
            proc = self.who.run(
                [self._tool("pg_ctl"), "-D", str(self.datadir), "status"], 60,
                what=f"pg_ctl status of {self.datadir}",
            )  # fmt: skip
            running = proc.returncode == 0
        return self.info(running)

    def stop(self) -> bool:
        """Stop the server if it runs (fast shutdown); remove a temporary cluster. Signals
        wait until it is done, so a second Ctrl-C leaves no server running. True when a
        running server was stopped, False when none ran."""
        running = False
        with signals.uninterrupted():
            try:
                running = self.initialised and self.status().running
                if running:
                    self._run(
                        [self._tool("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w",
                         "stop"],
                        f"stopping PostgreSQL in {self.datadir}",
                    )  # fmt: skip
            finally:
                if self.remove:
                    shutil.rmtree(self._tmp or self.datadir, ignore_errors=True)
        return running

    def restart(self) -> None:
        """Stop and start the server on the same port, keeping the cluster: what a cold
        read needs (empty shared_buffers)."""
        with signals.uninterrupted():
            if self.status().running:
                self._run(
                    [self._tool("pg_ctl"), "-D", str(self.datadir), "-m", "fast", "-w", "stop"],
                    f"stopping PostgreSQL in {self.datadir}",
                )
        self.port = self.port or self._configured_port()
        self._start(log_kept=False)

    def info(self, running: bool = True) -> ClusterInfo:
        """How to reach the cluster, from its configuration (no pg_ctl round trip)."""
        return ClusterInfo(
            self.tc.major,
            self.tc.version,
            self.datadir,
            self._configured_port() or 0,
            self.socket_dir,
            running,
        )

    def conninfo(self, dbname: str = "postgres", tcp: bool = False) -> str:
        # Called for every connection a test or a command opens: read the port from the
        # configuration rather than asking pg_ctl (a subprocess, as another user) each time.
        return self.info().conninfo(dbname, tcp)

    def __enter__(self) -> EmbeddedCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
