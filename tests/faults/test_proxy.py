"""The cutting proxy itself, against an echo server: exactly N bytes pass, then the
client sees a reset (RST) or an orderly end of stream (FIN); later connections are cut
at once, or pass again with ``heal``."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from tests.faults.proxy import CutProxy, Kind


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A loopback server that echoes every byte back, one thread per connection."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(0.05)
        stop = threading.Event()

        def serve(conn: socket.socket) -> None:
            with conn, contextlib.suppress(OSError):
                while data := conn.recv(65536):
                    conn.sendall(data)

        def accept() -> None:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    conn, _ = listener.accept()
                    threading.Thread(target=serve, args=(conn,), daemon=True).start()

        t = threading.Thread(target=accept, daemon=True)
        t.start()
        yield listener.getsockname()[1]
        stop.set()
        t.join()


def _read_until_cut(sock: socket.socket) -> tuple[bytes, str]:
    got = b""
    try:
        while data := sock.recv(65536):
            got += data
    except ConnectionResetError:
        return got, "reset"
    return got, "eof"


def _later(port: int) -> bytes:
    """What a new connection through the proxy gets back for a byte sent: b"" when it is
    cut (a reset may come as soon as the connect, or on send or receive)."""
    try:
        with socket.create_connection(("127.0.0.1", port), 5) as sock:
            sock.sendall(b"y")
            return _read_until_cut(sock)[0]
    except ConnectionResetError:
        return b""


@pytest.mark.parametrize("kind", ["rst", "fin"])
def test_exactly_n_bytes_then_the_cut(echo_port: int, kind: Kind) -> None:
    # 1,000 bytes out and their echo back: the cut at 1,500 lets 500 of the echo through.
    with CutProxy(echo_port, 1500, kind) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), 5) as sock:
            sock.sendall(b"x" * 1000)
            got, how = _read_until_cut(sock)
        assert proxy.cut_done and proxy.total == 1500
        assert got == b"x" * 500
        assert how == ("reset" if kind == "rst" else "eof")
        assert _later(proxy.port) == b""  # the link stays down: cut as it is accepted


def test_heal_lets_later_connections_through(echo_port: int) -> None:
    with CutProxy(echo_port, 10, "rst", heal=True) as proxy:
        with socket.create_connection(("127.0.0.1", proxy.port), 5) as sock:
            sock.sendall(b"z" * 20)
            assert _read_until_cut(sock)[0] == b""  # the 10 bytes went out, none came back
        with socket.create_connection(("127.0.0.1", proxy.port), 5) as later:
            later.sendall(b"again")
            assert later.recv(100) == b"again"
