"""What a built wheel promises: ``python -m pgblobdump``, one version everywhere.

The wheel itself, installed outside the checkout, is exercised by scripts/wheel-smoke
(run by .ci/run): that is where a module missing from the wheel would show.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import pgblobdump

ROOT = Path(__file__).resolve().parents[2]


def _module(*args: str) -> subprocess.CompletedProcess[str]:
    # From /, so the package comes from the installation, not from the current folder.
    return subprocess.run(
        [sys.executable, "-m", "pgblobdump", *args],
        capture_output=True, text=True, timeout=60, cwd="/",
    )  # fmt: skip


def test_python_m_runs_the_cli() -> None:
    result = _module("--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("Usage: pgblobdump [OPTIONS] COMMAND")
    assert "compare" in result.stdout and "restore" in result.stdout
    bad = _module("no-such-command")
    assert bad.returncode == 2
    assert bad.stderr.startswith("Error: ")


def test_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    # pyproject reads it from the package at build time; it holds no copy of its own.
    assert "version" not in project["project"]
    assert project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "pgblobdump.__version__"}
    assert importlib.metadata.version("pgblobdump") == pgblobdump.__version__


def test_version_option_prints_it() -> None:
    result = _module("--version")
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"pgblobdump, version {pgblobdump.__version__}\n"


def test_ci_runs_the_wheel_outside_the_checkout() -> None:
    """.ci/run calls scripts/wheel-smoke, which builds both distributions and installs the
    wheel into a fresh venv under mktemp, away from the checkout, and works from there."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nscripts/wheel-smoke\n" in ci
    smoke = ROOT / "scripts" / "wheel-smoke"
    assert smoke.stat().st_mode & 0o111
    text = smoke.read_text()
    for needed in ("-m build", "mktemp -d", "python3 -m venv", "--version", "doctor",
                   "generate", "dump", "restore", "verify", 'cd "$base"'):  # fmt: skip
        assert needed in text, needed
    # build is a dev dependency, so CI's install brings it
    dev = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(d.startswith("build") for d in dev["dev"])
