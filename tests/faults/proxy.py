"""A TCP proxy on loopback that cuts every connection through it after N bytes.

It sits between pgblobdump and a real PostgreSQL server: each connection accepted is
forwarded to the server, and the bytes forwarded in *both* directions, over *every*
connection of the run (a dump with --jobs 2 opens several), are counted together. When
the count reaches ``cut_at`` the bytes up to exactly that count are delivered, then every
connection is cut on both sides: by RST (SO_LINGER 0, as a dead middlebox or a reboot
does) or by FIN (an orderly close, as a proxy that gives up does). After the cut the link
stays down (a connection made later is cut as it is accepted) unless ``heal`` is set,
when later connections pass again (a blip: the run's clean-up can reach the server).
With ``cut_at=None`` nothing is cut: a run measures its byte total that way.
"""

from __future__ import annotations

import contextlib
import selectors
import socket
import struct
import threading
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

Kind = Literal["rst", "fin"]

_LINGER_0 = struct.pack("ii", 1, 0)
"""SO_LINGER on with a zero timeout: close() sends RST and drops what is unsent."""


def _cut(sock: socket.socket, kind: Kind) -> None:
    """End ``sock`` by RST or FIN; errors of an already-broken socket do not matter."""
    with contextlib.suppress(OSError):
        if kind == "rst":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_0)
        else:
            sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


@dataclass
class CutProxy:
    """``with CutProxy(port, cut_at, kind) as p``: connect to ``127.0.0.1:p.port``."""

    upstream_port: int
    cut_at: int | None = None
    kind: Kind = "rst"
    heal: bool = False
    port: int = 0
    total: int = 0
    """Bytes forwarded so far, both directions, every connection."""
    cut_done: bool = False
    """Whether the cut happened (a run may end before reaching ``cut_at``)."""
    connections: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _stop: threading.Event = field(default_factory=threading.Event, repr=False)
    _threads: list[threading.Thread] = field(default_factory=list, repr=False)
    _listener: socket.socket | None = field(default=None, repr=False)

    def __enter__(self) -> CutProxy:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._spawn(self._accept_loop)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        for t in list(self._threads):
            t.join(10)
        if self._listener is not None:
            self._listener.close()

    def conninfo(self, dbname: str, user: str) -> str:
        # sslmode=disable: the bytes counted are the protocol's, the same run after run.
        return f"host=127.0.0.1 port={self.port} user={user} dbname={dbname} sslmode=disable"

    def _spawn(self, target: object, *args: object) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)  # type: ignore[arg-type]
        self._threads.append(t)
        t.start()

    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
                down = self.cut_done and not self.heal
            if down:
                _cut(client, self.kind)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.upstream_port), 10)
            except OSError:
                _cut(client, self.kind)
                continue
            self._spawn(self._pump, client, server)

    def _take(self, n: int) -> tuple[int, bool]:
        """How many of ``n`` bytes may pass, and whether the cut comes after them."""
        with self._lock:
            if self.cut_done:
                return 0, True  # cut by another connection meanwhile: nothing more passes
            if self.cut_at is None:
                self.total += n
                return n, False
            room = self.cut_at - self.total
            if n < room:
                self.total += n
                return n, False
            self.total += room
            self.cut_done = True
            return room, True

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        """Forward both ways until either side closes, the cut comes, or the proxy stops."""
        # A connection that was already open when the cut came is cut; one opened after
        # a cut with heal set carries on.
        born_after_cut = self.cut_done
        peer = {client: server, server: client}
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(server, selectors.EVENT_READ)
            try:
                while not self._stop.is_set() and not (self.cut_done and not born_after_cut):
                    for key, _ in sel.select(0.02):
                        src = key.fileobj
                        assert isinstance(src, socket.socket)
                        data = src.recv(65536)
                        if not data:
                            # An orderly close by one side: pass it on, stop pumping.
                            with contextlib.suppress(OSError):
                                peer[src].shutdown(socket.SHUT_WR)
                            return
                        n, cut_now = (len(data), False) if born_after_cut else self._take(len(data))
                        peer[src].sendall(data[:n])
                        if cut_now:
                            break
            except OSError:
                pass
            finally:
                sel.unregister(client)
                sel.unregister(server)
                if self.cut_done and not born_after_cut:
                    _cut(client, self.kind)
                    _cut(server, self.kind)
                else:
                    client.close()
                    server.close()
