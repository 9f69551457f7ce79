"""A TCP proxy in front of the real S3 server that answers some requests with 503 Slow
Down (what S3 says when it throttles) and forwards the rest: fault injection in front of
a real server, not a stand-in for one."""

from __future__ import annotations

import contextlib
import socket
import threading

SLOW_DOWN = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/xml\r\n"
    b"Content-Length: 79\r\nConnection: close\r\n\r\n"
    b"<Error><Code>SlowDown</Code><Message>Please reduce your rate</Message></Error>\n"
)


class FlakyProxy:
    """``fail``: how many connections get 503 before the proxy starts forwarding (None:
    all of them). ``failed`` counts the 503s given."""

    def __init__(self, target_port: int, fail: int | None) -> None:
        self.target_port = target_port
        self.fail = fail
        self.failed = 0
        self._lock = threading.Lock()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._stop = False
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self._open.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with self._lock:
            refuse = self.fail is None or self.failed < self.fail
            if refuse:
                self.failed += 1
        if refuse:
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    head += chunk
                conn.sendall(SLOW_DOWN)
            return
        upstream = socket.create_connection(("127.0.0.1", self.target_port))
        with self._lock:
            self._open.append(upstream)
        threading.Thread(target=_pump, args=(upstream, conn), daemon=True).start()
        _pump(conn, upstream)

    def close(self) -> None:
        self._stop = True
        self._server.close()
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while chunk := src.recv(65536):
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
