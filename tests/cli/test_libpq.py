"""libpq's conventions, against a cluster that asks for a password over TCP: the password
file (~/.pgpass through HOME, PGPASSFILE), services (PGSERVICE, PGSERVICEFILE), sslmode
in -d, application_name (ours unless PGAPPNAME or -d names one); and no password in any
output, a wrong one included."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

from pgblobdump.errors import ToolchainError
from pgblobdump.pg.connect import connect
from pgblobdump.pg.target import APPLICATION_NAME, set_application_name
from pgblobdump.servers.cluster import EmbeddedCluster
from tests.clirun import assert_one_line_error, run

pytestmark = pytest.mark.pg

PASSWORD = "Sesame-7f3k9-secret"
ROLE = "face_app"


@dataclass(frozen=True)
class Locked:
    """A cluster whose TCP connections need a password (scram-sha-256); its socket
    stays trusted for the fixture's own administration."""

    cluster: EmbeddedCluster
    port: int

    def dsn(self, **extra: str) -> str:
        """Over TCP as ROLE, with no password: libpq must find one."""
        parts = {"host": "127.0.0.1", "port": str(self.port), "user": ROLE, "dbname": "postgres"}
        parts.update(extra)
        return " ".join(f"{k}={v}" for k, v in parts.items())


@pytest.fixture(scope="module")
def locked() -> Iterator[Locked]:
    try:
        made = EmbeddedCluster(17)
    except ToolchainError as e:
        pytest.skip(f"PostgreSQL 17 is not installed: {e}")
    with made as cluster:
        with psycopg.connect(cluster.conninfo(), autocommit=True) as conn:
            conn.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{PASSWORD}'")
            hba = Path(conn.execute("SHOW hba_file").fetchone()[0])  # type: ignore[index]
            hba.write_text(
                "local all all trust\n"
                "host all all 127.0.0.1/32 scram-sha-256\n"
                "host all all ::1/128 scram-sha-256\n"
            )
            conn.execute("SELECT pg_reload_conf()")
        yield Locked(cluster, cluster.info().port)


@pytest.fixture
def no_password_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No password from the environment, and an empty HOME (no ~/.pgpass, no service file)."""
    for var in ("PGPASSWORD", "PGPASSFILE", "PGSERVICE", "PGSERVICEFILE", "PGAPPNAME",
                "PGHOST", "PGPORT", "PGUSER", "PGDATABASE", "PGSSLMODE"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


def _dump(dsn: str, tmp_path: Path, *more: str) -> tuple[int, str, str]:
    out = tmp_path / f"a{len(list(tmp_path.iterdir()))}.pbd"
    r = run("dump", "-d", dsn, "-o", str(out), "--json", *more)
    return r.exit_code, r.stdout, r.stderr


def _no_secret(*texts: str) -> None:
    for t in texts:
        assert PASSWORD not in t and "wrong-Pa55" not in t, t


def _pgpass(path: Path, locked: Locked) -> Path:
    path.write_text(f"127.0.0.1:{locked.port}:*:{ROLE}:{PASSWORD}\n")
    path.chmod(0o600)  # libpq ignores a password file others can read
    return path


def test_no_password_is_a_one_line_error(locked: Locked, no_password_env: Path,
                                         tmp_path: Path) -> None:  # fmt: skip
    r = run("dump", "-d", locked.dsn(), "-o", str(tmp_path / "x"))
    assert_one_line_error(r, 3, "password")


def test_pgpass_in_home(locked: Locked, no_password_env: Path, tmp_path: Path) -> None:
    _pgpass(no_password_env / ".pgpass", locked)
    code, out, err = _dump(locked.dsn(), tmp_path)
    assert code == 0, err
    _no_secret(out, err)


def test_pgpassfile(locked: Locked, no_password_env: Path, tmp_path: Path,
                    monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    monkeypatch.setenv("PGPASSFILE", str(_pgpass(tmp_path / "passwords", locked)))
    code, _, err = _dump(locked.dsn(), tmp_path)
    assert code == 0, err


def test_service_file(locked: Locked, no_password_env: Path, tmp_path: Path,
                      monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    services = tmp_path / "services.conf"
    services.write_text(
        f"[facetest]\nhost=127.0.0.1\nport={locked.port}\nuser={ROLE}\ndbname=postgres\n"
        f"password={PASSWORD}\n"
    )
    monkeypatch.setenv("PGSERVICEFILE", str(services))
    code, out, err = _dump("service=facetest", tmp_path)  # in -d
    assert code == 0, err
    monkeypatch.setenv("PGSERVICE", "facetest")  # or with no connection option at all
    r = run("dump", "-o", str(tmp_path / "by-env"), "--json")
    assert r.exit_code == 0, r.stderr
    _no_secret(out, err, r.stdout, r.stderr)


@pytest.mark.parametrize("mode", ["disable", "prefer", "allow"])
def test_sslmode_that_a_plain_server_meets(locked: Locked, no_password_env: Path,
                                           tmp_path: Path, mode: str) -> None:  # fmt: skip
    code, _, err = _dump(locked.dsn(sslmode=mode, password=PASSWORD), tmp_path)
    assert code == 0, err


def test_sslmode_require_against_a_plain_server(locked: Locked, no_password_env: Path,
                                                tmp_path: Path) -> None:  # fmt: skip
    r = run("dump", "-d", locked.dsn(sslmode="require", password=PASSWORD), "-o",
            str(tmp_path / "x"))  # fmt: skip
    assert_one_line_error(r, 3, "SSL")
    _no_secret(r.stdout, r.stderr)


@pytest.mark.parametrize("where", ["dsn", "url", "env"])
def test_a_wrong_password_is_never_printed(locked: Locked, no_password_env: Path,
                                           tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           where: str) -> None:  # fmt: skip
    wrong = "wrong-Pa55"
    if where == "dsn":
        dsn = locked.dsn(password=wrong)
    elif where == "url":
        dsn = f"postgresql://{ROLE}:{wrong}@127.0.0.1:{locked.port}/postgres"
    else:
        monkeypatch.setenv("PGPASSWORD", wrong)
        dsn = locked.dsn()
    r = run("dump", "-v", "-d", dsn, "-o", str(tmp_path / "x"))
    assert_one_line_error(r, 3, "password authentication failed")
    _no_secret(r.stdout, r.stderr)


def _app_name_seen(locked: Locked, dsn: str) -> str:
    """What pg_stat_activity shows for a session of ours, asked from another session."""
    with connect(dsn) as ours, psycopg.connect(locked.cluster.conninfo()) as other:
        row = other.execute(
            "SELECT application_name FROM pg_stat_activity WHERE pid = %s",
            (ours.info.backend_pid,),
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_application_name_in_pg_stat_activity(locked: Locked, no_password_env: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    dsn = locked.dsn(password=PASSWORD)
    set_application_name("pgblobdump restore")
    try:
        assert _app_name_seen(locked, dsn) == "pgblobdump restore"
        # The user's name wins: -d's application_name, else PGAPPNAME.
        assert _app_name_seen(locked, dsn + " application_name=nightly") == "nightly"
        monkeypatch.setenv("PGAPPNAME", "from-env")
        assert _app_name_seen(locked, dsn) == "from-env"
    finally:
        set_application_name(APPLICATION_NAME)


def test_the_command_names_its_sessions(locked: Locked, no_password_env: Path,
                                        tmp_path: Path) -> None:  # fmt: skip
    """-v says what pg_stat_activity shows for the session: the command's name."""
    r = run("dump", "-v", "-d", locked.dsn(password=PASSWORD), "-o", str(tmp_path / "v"))
    assert r.exit_code == 0, r.stderr
    assert "pg_stat_activity shows application_name 'pgblobdump dump'" in r.stderr, r.stderr
    _no_secret(r.stdout, r.stderr)
