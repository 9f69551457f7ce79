"""The README's one-line SeaweedFS server names every port it listens on, from a base the
reader chooses, so a shared host's services (8080, 8888, ...) are never in its way."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from pgblobdump.errors import ToolchainError
from pgblobdump.servers.seaweed import PORT_FLAGS, PORTS_OFF, weed_binary

README = Path(__file__).resolve().parents[2] / "README.md"


def _weed_lines() -> tuple[str, str]:
    """The README's ``P=`` line and its weed command (continuation lines joined, the
    trailing ``&`` and comment dropped)."""
    lines = README.read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if "&& weed server" in line]
    (base,) = [line for line in lines[start - 3 : start] if line.startswith("P=")]
    command = lines[start]
    i = start
    while command.rstrip().endswith("\\"):
        i += 1
        command = command.rstrip()[:-1] + " " + lines[i].strip()
    command = command.split("#")[0].strip()
    assert command.endswith("&"), command
    return base, command[:-1].strip()


def test_every_port_is_given_from_the_base() -> None:
    _, command = _weed_lines()
    given = dict(re.findall(r"-([\w.]+)=(\S+)", command))
    offsets = {given[flag] for flag in PORT_FLAGS}
    assert offsets == {"$P", *(f"$((P+{k}))" for k in range(1, len(PORT_FLAGS)))}, given
    assert all(given[flag] == "0" for flag in PORTS_OFF)
    assert given["ip.bind"] == "127.0.0.1"


def _free_base(n: int) -> int:
    """A port P with P..P+n-1 free on 127.0.0.1 now."""
    for base in range(20_000 + os.getpid() % 20_000, 60_000, 97):
        with contextlib.ExitStack() as stack:
            try:
                for port in range(base, base + n):
                    s = stack.enter_context(socket.socket())
                    s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return base
    raise AssertionError("no run of free ports")


def _listening(pid: int) -> set[int]:
    """TCP ports process ``pid`` listens on (from /proc: its sockets' inodes)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            m = re.fullmatch(r"socket:\[(\d+)\]", os.readlink(fd))
            if m:
                inodes.add(m.group(1))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            for row in f.read().splitlines()[1:]:
                fields = row.split()
                if fields[3] == "0A" and fields[9] in inodes:  # LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


@pytest.mark.s3  # starts SeaweedFS itself, as the README does
@pytest.mark.skipif(not Path("/proc/net/tcp").is_file(), reason="reads /proc/net/tcp")
def test_the_readme_server_listens_only_where_it_says() -> None:
    try:
        weed = weed_binary()
    except ToolchainError as e:
        pytest.skip(str(e))
    base_line, command = _weed_lines()
    base = _free_base(len(PORT_FLAGS))
    data = Path(tempfile.mkdtemp(prefix="pgbd-readme-s3-"))
    command = command.replace("/tmp/s3", str(data)).replace("&& weed ", "&& exec weed ")
    env = {**os.environ, "P": str(base), "PATH": f"{weed.parent}:{os.environ['PATH']}"}
    assert base_line.split()[0] == "P=18330"
    proc = subprocess.Popen(["bash", "-c", f"cd {data} && {command}"], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)  # fmt: skip
    try:
        endpoint = f"http://127.0.0.1:{base + PORT_FLAGS.index('s3.port')}"
        deadline = time.monotonic() + 90
        while True:  # the README's curl -X PUT: the bucket
            try:
                urllib.request.urlopen(urllib.request.Request(f"{endpoint}/backups",
                                                              method="PUT"), timeout=5)  # fmt: skip
                break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                assert proc.poll() is None, "weed exited"
                assert time.monotonic() < deadline, "the README's server did not serve S3"
                time.sleep(0.5)
        listening = _listening(proc.pid)
        assert base + PORT_FLAGS.index("s3.port") in listening
        assert listening <= set(range(base, base + len(PORT_FLAGS))), sorted(listening)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for port in range(base, base + len(PORT_FLAGS)):
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-{port}.sock"):
                sock.unlink(missing_ok=True)
        subprocess.run(["rm", "-rf", str(data)], check=False)
