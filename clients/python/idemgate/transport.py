"""HTTP with one keep-alive connection per thread.

A fresh TCP connection per call would cost more than the gateway's own
work on a reserve or a completion, so each thread keeps one connection
to the gateway (http.client is not thread-safe; one per thread needs no
lock). A connection idle for long, or one the server has closed, is
replaced before a request is written on it, so that a request is never
lost to a connection that was already dead.

Every call says whether its request may have reached the gateway
(``sent``): "connection refused" means nothing happened, a timeout after
writing means anything may have, and the callers treat the two apart.
"""

import http.client
import json
import select
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Optional, cast

# The largest answer read; a longer one closes the connection.
MAX_BODY = 4 << 20
# A connection idle this long is replaced: the gateway closes idle
# connections after two minutes (idle_timeout), and a request written on a
# connection the server is closing may be lost.
MAX_IDLE = 30.0


class Response:
    """One answer: status, headers (names lower-case) and body bytes."""

    __slots__ = ("status", "headers", "body")

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)

    def json(self) -> Any:
        """The body as JSON, or None if it is empty or not JSON."""
        try:
            return json.loads(self.body.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return None

    def problem(self) -> Optional[Dict[str, Any]]:
        """The RFC 9457 problem this answer is, or None."""
        media = self.header("content-type").split(";")[0].strip().lower()
        if media != "application/problem+json":
            return None
        p = self.json()
        return p if isinstance(p, dict) else None

    def code(self) -> str:
        """The problem's code, or "" if the answer is not a problem."""
        p = self.problem()
        return str(p.get("code") or "") if p else ""

    def retry_after(self) -> float:
        """Retry-After in seconds (the gateway's form), 0 if absent."""
        value = self.header("retry-after")
        try:
            return max(0.0, float(int(value)))
        except ValueError:
            return _http_date_delay(value)


def _http_date_delay(value: str) -> float:
    if not value:
        return 0.0
    try:
        from email.utils import parsedate_to_datetime
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, IndexError):
        return 0.0


class TransportError(Exception):
    """No answer. ``sent`` says whether the request may have reached the
    gateway: False only when it certainly did not (refused, unresolved)."""

    def __init__(self, cause: str, sent: bool) -> None:
        self.cause = cause
        self.sent = sent
        super().__init__(cause)


class Transport:
    """Sends requests to one base URL over per-thread keep-alive connections."""

    def __init__(self, base_url: str, timeout: float = 30.0,
                 ssl_context: Optional[ssl.SSLContext] = None) -> None:
        u = urllib.parse.urlsplit(base_url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError("gateway URL %r: want http:// or https:// and a host" % base_url)
        self.base_url = base_url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self._ssl = ssl_context
        self.timeout = timeout
        self._local = threading.local()
        self._all: "list[http.client.HTTPConnection]" = []
        self._lock = threading.Lock()

    def request(self, method: str, path: str, body: Optional[bytes] = None,
                headers: Optional[Dict[str, str]] = None, timeout: Optional[float] = None) -> Response:
        """Sends one request; raises TransportError when no answer came."""
        conn = self._connection(timeout)
        try:
            if conn.sock is None:
                conn.connect()
                # http.client writes the headers and the body in two sends:
                # with Nagle's algorithm the body may wait for the peer's
                # delayed ACK (40 ms on Linux) on a real network.
                cast(socket.socket, conn.sock).setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError as e:
            self._drop(conn)
            raise TransportError(cause(e), sent=False) from None  # no request byte was written
        try:
            conn.request(method, self._prefix + path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data = resp.read(MAX_BODY + 1)
        except (OSError, http.client.HTTPException) as e:
            self._drop(conn)
            raise TransportError(cause(e), sent=True) from None
        if len(data) > MAX_BODY or resp.will_close:
            self._drop(conn)
        else:
            self._local.used = time.monotonic()
        hdrs = {k.lower(): v for k, v in resp.getheaders()}
        return Response(resp.status, hdrs, data[:MAX_BODY])

    def _connection(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        """This thread's connection, checked: a connection idle too long, or
        one the server closed (readable while idle), is replaced."""
        conn = getattr(self._local, "conn", None)
        if conn is not None and conn.sock is not None:
            idle = time.monotonic() - getattr(self._local, "used", 0.0)
            if idle > MAX_IDLE or _dropped(conn.sock):
                conn.close()
        if conn is None:
            conn = self._new()
            self._local.conn = conn
        t = self.timeout if timeout is None else timeout
        conn.timeout = t
        if conn.sock is not None:
            conn.sock.settimeout(t)
        return conn

    def _new(self) -> http.client.HTTPConnection:
        if self._https:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self._host, self._port, timeout=self.timeout, context=self._ssl)
        else:
            conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)
        with self._lock:
            self._all.append(conn)
        return conn

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        conn.close()

    def close(self) -> None:
        """Closes every thread's connection (a thread that sends again
        opens a new one)."""
        with self._lock:
            conns, self._all = self._all, []
        for c in conns:
            c.close()
        self._local = threading.local()


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket that is readable has been closed by the
    server (or sent something unasked): it must not carry a request."""
    try:
        if hasattr(select, "poll"):
            p = select.poll()
            p.register(sock, select.POLLIN)
            return bool(p.poll(0))
        r, _, _ = select.select([sock], [], [], 0)
        return bool(r)
    except (OSError, ValueError):
        return True


def cause(e: BaseException) -> str:
    """A transport error in a few words, without the URL."""
    if isinstance(e, ConnectionRefusedError):
        return "connection refused"
    if isinstance(e, ConnectionResetError):
        return "connection reset"
    if isinstance(e, socket.gaierror):
        return "cannot resolve the gateway's host"
    if isinstance(e, (socket.timeout, TimeoutError)):
        return "timed out"
    if isinstance(e, http.client.RemoteDisconnected):
        return "the connection closed without an answer"
    if isinstance(e, (http.client.IncompleteRead, BrokenPipeError)):
        return "the connection closed mid-answer"
    if isinstance(e, OSError) and e.strerror:
        return e.strerror.lower()
    return str(e) or type(e).__name__
