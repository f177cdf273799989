"""The control API's transport: HTTP/1.1 on a unix socket or over TCP."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import ssl
import threading
import uuid
from typing import Any, Dict, Iterator, List, Mapping, Optional, Tuple, Union
from urllib.parse import quote, urlencode, urlsplit

from . import errors

DEFAULT_SOCKET = "/run/airlock/airlock.sock"
API_VERSION = "/v1"

Query = Mapping[str, Union[str, int, bool, None]]


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("airlock", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    """HTTPS whose server certificate must have the pinned SHA-256."""

    def __init__(self, host: str, port: int, timeout: Optional[float], context: ssl.SSLContext, pin: bytes) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._pin = pin

    def connect(self) -> None:
        super().connect()
        der = self.sock.getpeercert(binary_form=True) or b""
        if hashlib.sha256(der).digest() != self._pin:
            self.close()
            raise ssl.SSLError(f"the appliance's certificate (sha256 {hashlib.sha256(der).hexdigest()}) "
                               "does not match the pinned fingerprint")


def parse_fingerprint(s: str) -> bytes:
    """A SHA-256 fingerprint in hex, colons and case ignored."""
    h = s.strip().lower()
    if h.startswith("sha256:"):
        h = h[len("sha256:"):]
    try:
        b = bytes.fromhex(h.replace(":", ""))
    except ValueError:
        b = b""
    if len(b) != 32:
        raise errors.Invalid(f"fingerprint {s!r}: want the 64 hex digits of a SHA-256", "invalid")
    return b


class Response:
    """A successful response; iterate lines or read the body once."""

    def __init__(self, transport: "Transport", conn: http.client.HTTPConnection,
                 resp: http.client.HTTPResponse) -> None:
        self._t, self._conn, self._resp = transport, conn, resp
        self.status = resp.status
        self.request_id = resp.getheader("X-Request-Id", "") or ""
        self.headers = resp.headers

    def read(self) -> bytes:
        try:
            return self._resp.read()
        finally:
            self.close()

    def json(self) -> Any:
        body = self.read()
        return json.loads(body) if body else None

    def lines(self) -> Iterator[bytes]:
        """Yield the body's lines (NDJSON) as they arrive."""
        try:
            while True:
                line = self._resp.readline()
                if not line:
                    return
                line = line.strip()
                if line:
                    yield line
        finally:
            self.close()

    def close(self) -> None:
        if self._conn is None:
            return
        conn, self._conn = self._conn, None
        if self._resp.isclosed() and not self._resp.will_close:
            self._t._release(conn)
        else:
            conn.close()


class Transport:
    """Sends requests to one appliance; safe for use from several threads.

    ``url`` is ``unix:///path/to.sock``, a socket path, or
    ``https://host:port`` (``http://`` too, for loopback tests); with none
    it is ``$AIRLOCK_URL``, else the socket ``$AIRLOCK_SOCKET``, else
    ``/run/airlock/airlock.sock`` (the CLI's default). ``token`` (default
    ``$AIRLOCK_TOKEN``) is sent as a bearer token over TCP.

    Over https the appliance's certificate is checked against ``ca_file``
    (default ``$AIRLOCK_CA_FILE``; e.g. the appliance CA from ``airlock ca
    export``, which signs the certificate serve mints), else the system
    roots. ``fingerprint`` (default ``$AIRLOCK_FINGERPRINT``) instead pins
    the server certificate itself by its SHA-256 (hex): use it for a
    configured certificate (``control.tls_cert``); a minted one is renewed
    daily, so pin its CA with ``ca_file``. ``ssl_context`` overrides both.
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 120.0, ssl_context: Optional[ssl.SSLContext] = None,
                 ca_file: Optional[str] = None, fingerprint: Optional[str] = None) -> None:
        url = url or os.environ.get("AIRLOCK_URL") or ""
        self.token = token if token is not None else os.environ.get("AIRLOCK_TOKEN", "")
        self.timeout = timeout
        self._ssl = ssl_context
        ca_file = ca_file if ca_file is not None else os.environ.get("AIRLOCK_CA_FILE", "")
        fp = fingerprint if fingerprint is not None else os.environ.get("AIRLOCK_FINGERPRINT", "")
        self._pin = parse_fingerprint(fp) if fp else b""
        if self._ssl is None and self._pin:
            self._ssl = ssl.create_default_context()
            self._ssl.check_hostname = False
            self._ssl.verify_mode = ssl.CERT_NONE  # the pin is the check (_PinnedHTTPSConnection)
        elif self._ssl is None and ca_file:
            try:
                self._ssl = ssl.create_default_context(cafile=ca_file)
            except (OSError, ssl.SSLError) as e:
                raise errors.Invalid(f"ca_file {ca_file!r}: {e}", "invalid") from e
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.socket = ""
        self._host, self._port, self._scheme = "", 0, ""
        if not url or url.startswith("unix:") or url.startswith("/"):
            path = url[len("unix://"):] if url.startswith("unix://") else url[len("unix:"):] if url.startswith("unix:") else url
            self.socket = path or os.environ.get("AIRLOCK_SOCKET") or DEFAULT_SOCKET
            return
        u = urlsplit(url)
        if u.scheme not in ("https", "http") or not u.hostname:
            raise errors.Invalid(f"AIRLOCK_URL/url {url!r}: want unix:///path, https://host:port or http://host:port", "invalid")
        self._scheme, self._host = u.scheme, u.hostname
        self._port = u.port or (443 if u.scheme == "https" else 80)

    def describe(self) -> str:
        """Where the appliance is, for messages."""
        return self.socket or f"{self._scheme}://{self._host}:{self._port}"

    def _connect(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        if self.socket:
            return _UnixConnection(self.socket, timeout)
        if self._scheme == "https" and self._pin:
            assert self._ssl is not None
            return _PinnedHTTPSConnection(self._host, self._port, timeout, self._ssl, self._pin)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout,
                                               context=self._ssl or ssl.create_default_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout)

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                conn = self._idle.pop()
                conn.timeout = timeout
                if conn.sock is not None:
                    conn.sock.settimeout(timeout)
                return conn, True
        return self._connect(timeout), False

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < 8:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def request(self, method: str, path: str, query: Optional[Query] = None, body: Any = None,
                data: Optional[bytes] = None, timeout: Optional[float] = -1.0,
                headers: Optional[Dict[str, str]] = None) -> Response:
        """Send a request; raise the typed error of a failure.

        ``body`` is sent as JSON, ``data`` as bytes. ``timeout`` bounds each
        socket operation (-1: the transport's; None: none).
        """
        url = API_VERSION + path
        q = {k: ("true" if v is True else "false" if v is False else str(v))
             for k, v in (query or {}).items() if v is not None and v != ""}
        if q:
            url += "?" + urlencode(q)
        hdrs = {"X-Request-Id": "py-" + uuid.uuid4().hex[:16]}
        if self.token and not self.socket:
            hdrs["Authorization"] = "Bearer " + self.token
        payload: Optional[bytes] = data
        if body is not None:
            payload = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        elif data is not None:
            hdrs["Content-Type"] = "application/octet-stream"
        if payload is not None or method in ("POST", "PUT"):
            hdrs["Content-Length"] = str(len(payload or b""))
        hdrs.update(headers or {})
        to = self.timeout if timeout == -1.0 else timeout
        for attempt in (0, 1):
            conn, reused = self._take(to)
            try:
                conn.request(method, url, body=payload, headers=hdrs)
                resp = conn.getresponse()
                break
            except (socket.timeout, TimeoutError) as e:
                conn.close()
                raise errors.Timeout(f"{method} {path}: no answer from the appliance at {self.describe()} within {to}s",
                                     "timeout", 0, hdrs["X-Request-Id"]) from e
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and attempt == 0:
                    continue  # an idle keep-alive connection the server closed
                raise self._unreachable(e, hdrs["X-Request-Id"]) from e
            except OSError as e:
                conn.close()
                raise self._unreachable(e, hdrs["X-Request-Id"]) from e
        r = Response(self, conn, resp)
        if resp.status >= 300:
            raise self._error(r)
        return r

    def _unreachable(self, e: OSError, rid: str) -> errors.AirlockError:
        where = self.describe()
        if isinstance(e, FileNotFoundError):
            msg = f"no airlock appliance at {where}: start one with `airlock serve --config FILE`, or set AIRLOCK_SOCKET / AIRLOCK_URL"
        elif isinstance(e, PermissionError):
            return errors.Denied(f"permission denied on {where}: join the airlock group or run as root", "unauthorized", 0, rid)
        else:
            msg = f"cannot reach airlock at {where}: {e}"
        return errors.Unavailable(msg, "unavailable", 0, rid)

    @staticmethod
    def _error(r: Response) -> errors.AirlockError:
        raw = r.read()
        try:
            body = json.loads(raw)
            code, msg = body.get("code", ""), body.get("message", "")
            rid = body.get("request_id", "") or r.request_id
        except (ValueError, AttributeError):
            code, msg, rid = "", "", r.request_id
        if not msg:
            msg = f"HTTP {r.status}: {raw[:200].decode(errors='replace').strip()}"
        return errors.from_api(r.status, code, msg, rid)


def seg(s: str) -> str:
    """Escape one path segment."""
    return quote(s, safe="")
