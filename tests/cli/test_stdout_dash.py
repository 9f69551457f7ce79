"""``-o -`` is standard output wherever one stream can hold the output (``dump``, ``cat``,
``toc extract``), and refused in one line, exit 2, where it cannot (a directory, a file
written out of order, a summary that would mix with the archive); no file named ``-``
is ever made. ``ls`` of a pg_dump archive names ``toc los``; on a terminal ``ls`` prints
aligned columns, into a pipe tab-separated lines. No server: the archives are the
repository's pg_dump corpus and a pack of one."""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import assert_one_line_error, run

CORPUS = Path(__file__).parents[1] / "corpus" / "archives"
DUMP = CORPUS / "pg17-custom-none.dump"
OID = 1003  # 6,026 bytes


def _md5(oid: int) -> str:
    los = json.loads((CORPUS / "pg17-custom-none.json").read_text())["los"]
    return next(lo["md5"] for lo in los if lo["oid"] == oid)


@pytest.fixture
def packed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A packed archive of the corpus dump; the working directory is an empty one, so a
    file named ``-`` would be seen."""
    out = tmp_path / "packed"
    assert run("pack", str(DUMP), "-o", str(out), "-q").exit_code == 0
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    return out


@pytest.mark.parametrize("command", ["cat", "toc extract"])
def test_dash_is_stdout(command: str, packed: Path) -> None:
    # Before: a file named "-" in the working directory, and nothing on stdout.
    archive = packed if command == "cat" else DUMP
    result = run(*command.split(), str(archive), str(OID), "-o", "-")
    assert result.exit_code == 0, result.stderr
    assert hashlib.md5(result.stdout_bytes).hexdigest() == _md5(OID)
    assert not Path("-").exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["merge", "P", "-o", "-"], "- is standard output, which cannot hold the directory"
         " pgblobdump merge writes: name a new directory"),
        (["pack", "D", "-o", "-"], "- is standard output, which cannot hold the directory"
         " pgblobdump pack writes: name a new directory"),
        (["unpack", "P", "-o", "-"], "- is standard output, which cannot hold a pg_dump archive"),
        (["unpack", "P", "-o", "-", "--format", "custom"], "cannot hold a pg_dump archive (a"
         " directory, or a custom file whose offsets are written after its data)"),
        (["dump", "-d", "host=/nonexistent port=1", "-o", "-", "--json"],
         "--json prints to stdout, which -o - fills with the archive"),
        (["dump", "-d", "host=/nonexistent port=1", "-o", "-", "--csv"],
         "--csv prints to stdout, which -o - fills with the archive"),
        (["vacuum", "-d", "host=/nonexistent port=1", "--archive-to", "-"],
         "--archive-to -: - is standard output, which cannot hold the archive"),
    ],
)  # fmt: skip
def test_dash_is_refused_where_a_stream_cannot_hold_the_output(
    packed: Path, args: list[str], fragment: str
) -> None:
    # Before: merge, pack, unpack and vacuum made a directory named "-"; dump printed its
    # JSON into the archive stream.
    given = {"P": str(packed), "D": str(DUMP)}
    result = run(*[given.get(a, a) for a in args])
    assert_one_line_error(result, 2, fragment)
    assert result.stdout == ""
    assert not Path("-").exists()


@pytest.mark.parametrize(
    ("name", "kind"),
    [("pg17-custom-none.dump", "custom"), ("pg17-directory-none", "directory"),
     ("pg17-tar-none.tar", "tar")],
)  # fmt: skip
def test_ls_and_cat_of_a_pg_dump_archive_name_the_toc_command(name: str, kind: str) -> None:
    path = CORPUS / name
    assert_one_line_error(
        run("ls", str(path)), 7, f"; it is a pg_dump {kind} archive: pgblobdump toc los {path}"
    )
    assert_one_line_error(
        run("cat", str(path), "1002"),
        7,
        f"; it is a pg_dump {kind} archive: pgblobdump toc extract {path} 1002 reads it",
    )


def test_ls_of_another_file_names_no_toc_command(tmp_path: Path) -> None:
    other = tmp_path / "notes.txt"
    other.write_text("not an archive\n")
    result = run("ls", str(other))
    assert_one_line_error(result, 7, "not a packed archive")
    assert "toc los" not in result.stderr


def _on_a_terminal(*args: str, columns: int | None = None) -> str:
    """The command's stdout when stdout is a terminal (a pseudo-terminal), ``columns``
    wide when given; its stderr is kept in ``_STDERR``."""
    code, out, err = _run_on_a_terminal(*args, columns=columns)
    assert code == 0, err
    _STDERR[:] = [err]
    return out


def _run_on_a_terminal(*args: str, columns: int | None = None) -> tuple[int, str, str]:
    """The command's exit status, stdout (a pseudo-terminal) and stderr (a pipe)."""
    leader, follower = pty.openpty()
    env = dict(os.environ)
    if columns is not None:
        env["COLUMNS"] = str(columns)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pgblobdump", *args],
            stdout=follower,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            env=env,
        )
    finally:
        os.close(follower)
    chunks = []
    try:
        while chunk := os.read(leader, 65536):
            chunks.append(chunk)
    except OSError:  # EIO: the terminal's other end is closed and all was read
        pass
    finally:
        os.close(leader)
    out = b"".join(chunks).decode(errors="replace").replace("\r\n", "\n")
    return done.returncode, out, done.stderr


@pytest.mark.parametrize("command", ["cat", "toc extract"])
def test_a_binary_lo_is_not_poured_onto_a_terminal(command: str, packed: Path) -> None:
    # Before: LO 1003's NUL bytes went onto the terminal, while dump -o - refused to.
    archive = str(packed if command == "cat" else DUMP)
    code, out, err = _run_on_a_terminal(*command.split(), archive, str(OID))
    assert (code, out) == (2, ""), err
    assert err.splitlines() == [
        f"Error: LO {OID} is binary (a NUL byte in its first 8 KiB) and stdout is a terminal:"
        " give -o FILE, or -o - to print it anyway"
    ]
    code, out, err = _run_on_a_terminal(*command.split(), archive, str(OID), "-o", "-")
    assert code == 0 and len(out) >= 6_026 and "\x00" in out, err  # -o - forces it
    assert _on_a_terminal(*command.split(), archive, "1002") == "hello"  # text still prints
    piped = run(*command.split(), archive, str(OID))  # not a terminal: as before
    assert piped.exit_code == 0 and hashlib.md5(piped.stdout_bytes).hexdigest() == _md5(OID)


_STDERR = [""]
"""The last ``_on_a_terminal`` run's stderr."""


@pytest.mark.parametrize("command", ["ls", "toc los"])
def test_a_listing_on_a_terminal_is_a_table_and_tab_separated_into_a_pipe(
    command: str, packed: Path
) -> None:
    archive = packed if command == "ls" else DUMP
    # Before: the tab-separated lines on a terminal too.
    shown = _on_a_terminal(*command.split(), str(archive)).splitlines()
    assert "\t" not in "".join(shown)
    head, rule, *rows = shown
    assert head.split()[:2] == (["oid", "size"] if command == "ls" else ["oid", "owner"])
    assert set(rule) == {"-", " "}
    row = next(r for r in rows if r.split()[0] == str(OID))
    assert "6,026" in row.split()  # sizes for people
    assert head.index("oid") + len("oid") == len(row.split()[0]) + row.index(row.split()[0])
    piped = run(*command.split(), str(archive))
    lines = piped.stdout.splitlines()
    assert lines[0].split("\t")[0] == "oid" and f"{OID}\t" in piped.stdout
    assert "6026" in next(x for x in lines if x.startswith(f"{OID}\t")).split("\t")


ACL = (
    "GRANT ALL ON LARGE OBJECT 2147483649 TO lo_bob WITH GRANT OPTION;; SET SESSION"
    ' AUTHORIZATION lo_bob;; GRANT SELECT ON LARGE OBJECT 2147483649 TO "Lo Carol";;'
    " RESET SESSION AUTHORIZATION;"
)
"""The corpus dump's longest ACL cell (186 characters)."""


@pytest.mark.parametrize("width", [100, 200])
def test_toc_los_on_a_terminal_fits_its_width(width: int) -> None:
    # Before: columns as wide as the widest ACL (248 in all), every row wrapped.
    shown = _on_a_terminal("toc", "los", str(DUMP), columns=width).splitlines()
    assert all(len(line) <= width for line in shown), shown
    head = shown[0].split()
    assert head == ["oid", "owner", "stored", "acl", "comment"]
    row = next(r for r in shown if r.split()[0] == "2147483649")
    assert row.endswith("  a comment over two lines")  # the comment whole, the ACL cut
    assert "…" in row and ACL not in row
    assert "lo_alice" in row.split() and "9" in row.split()
    assert next(r for r in shown if r.split()[0] == "1004").rstrip().endswith(
        "GRANT SELECT ON LARGE OBJECT 1004 TO PUBLIC;")  # fmt: skip
    cut = 2 if width == 100 else 1  # the REVOKE ... (110 characters) fits 200 whole
    assert f"{cut} cell{'s' if cut > 1 else ''} cut with … to fit {width} columns:" in _STDERR[0]
    assert "--csv or --json lists them whole" in _STDERR[0]
    piped = run("toc", "los", str(DUMP))  # into a pipe: whole, tab-separated, no note
    assert f"\t{ACL}\t" in piped.stdout and "…" not in piped.stdout and "cut" not in piped.stderr


@pytest.mark.parametrize("width", [100, 200])
def test_ls_on_a_terminal_fits_its_width(width: int, packed: Path) -> None:
    shown = _on_a_terminal("ls", str(packed), columns=width).splitlines()
    assert all(len(line) <= width for line in shown), shown
    assert shown[0].split() == ["oid", "size", "owner", "acl", "comment"]
    # Before: 123 columns wide whatever the terminal's, every row wrapped at 100.
    row = next(r for r in shown if r.split()[0] == "2147483649")
    acl = 'lo_alice=rw/lo_alice; lo_bob=r*w*/lo_alice; "Lo Carol"=r/lo_bob'
    assert row.endswith("  a comment over two lines") and "lo_alice" in row.split()[:3]
    if width == 100:  # the ACL cut, the comment whole
        assert "…" in row and acl not in row
        assert "1 cell cut with … to fit 100 columns:" in _STDERR[0]
    else:  # as before: it fits
        assert acl in row and "…" not in "".join(shown) and "cut" not in _STDERR[0]
    piped = run("ls", str(packed))
    assert "…" not in piped.stdout and "cut" not in piped.stderr


def test_toc_los_heads_the_stored_size_as_stored() -> None:
    # Before: "size" headed the stored (here gzip-compressed) byte count, which is not the
    # LO's size: 1003's 6,026 bytes are stored in far fewer.
    gzip = CORPUS / "pg17-custom-gzip.dump"
    head, _rule, *rows = _on_a_terminal("toc", "los", str(gzip)).splitlines()
    assert head.split() == ["oid", "owner", "stored", "acl", "comment"]
    stored = int(next(r for r in rows if r.split()[0] == str(OID)).split()[2].replace(",", ""))
    assert 0 < stored < 6_026
    doc = json.loads(run("toc", "los", str(gzip), "--json").stdout)  # the key stays "size"
    assert next(r["size"] for r in doc if r["oid"] == OID) == stored
    assert run("toc", "los", str(gzip), "--csv").stdout.startswith("oid,owner,size,")
