"""The HTTP server's limits: request bodies, the error shape, connections and timeouts.

- :class:`BodyLimits` (ASGI middleware) reads a request's body before the app does: over
  ``limits.body_bytes`` → 413, never buffered (by ``Content-Length``, or as soon as a
  chunked body passes it; the rest is read and dropped, :data:`DRAIN_FACTOR`), not in
  ``limits.header_timeout`` seconds → 408, and a JSON body
  (``Content-Type: application/json`` or ``+json``; or none, when it parses as JSON) with
  ``NaN``/``Infinity``/``1e400``, nested deeper than ``limits.depth`` or with a NUL character
  in a string → 422. The app then reads the buffered body. A path or query with a NUL
  character (``%00``) is 422 too, whatever the method.
- :func:`install_errors`: every error is ``{"detail": "one line"}`` (``detail`` at most
  ``limits.error_chars``), a validation error adds ``errors`` (type, loc, msg: never the
  input), an unexpected one is 500 ``{"detail": "internal error"}``.
- :func:`guarded_protocol`: uvicorn's h11 protocol with a head timeout (a connection that has
  not sent a whole request head ``header_timeout`` s after it opened, or after its last
  response, is closed: slowloris) and a connection cap (past it the oldest idle connection
  is closed, so idle connections can neither exhaust the file handles nor lock out others).
  A connection whose first bytes have arrived but are not read yet is not idle: in a burst
  of accepted connections (a flood queued while the server was busy) every connection is
  made before any is read, and the oldest-first rule alone would close a client's request
  that sits among the flood's idle ones (:func:`unread`).
- :func:`raise_nofile`, :func:`quiet_logs`: the file limit raised to its hard limit; the
  repeated warnings and tracebacks of asyncio and uvicorn at most once per 10 s per message.
"""

from __future__ import annotations

import asyncio
import collections
import fcntl
import json
import logging
import struct
import termios
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from merkat.service.limits import InputError, LimitsConfig, clip, load_json

if TYPE_CHECKING:
    from fastapi import FastAPI

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
"""The methods whose bodies the API reads (other bodies are left unread, never buffered)."""

DRAIN_FACTOR = 64
"""A refused body is read and dropped up to 64 times ``body_bytes`` (within the head
timeout) before the 413, unless the client waits for ``100 Continue``."""

FILE_RESERVE = 256
"""File handles kept for the database, the VMs' logs and processes, whatever the cap."""


async def send_error(send: Send, status: int, detail: str, close: bool = False) -> None:
    """An error response of the one shape ``{"detail": ...}`` (``close``: and close the
    connection; else the rest of a refused body is read and dropped, so the client reads the
    answer, within the connection's head timeout)."""
    body = json.dumps({"detail": detail}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                            *([(b"connection", b"close")] if close else [])]})
    await send({"type": "http.response.body", "body": body})


def _json_type(ctype: str | None) -> bool | None:
    """True: a JSON content type; None: none given; False: another."""
    if not ctype:
        return None
    main = ctype.split(";", 1)[0].strip().lower()
    return main == "application/json" or (main.startswith("application/")
                                          and main.endswith("+json"))


def _nul_in(scope: Scope) -> str | None:
    """``path`` or ``query`` when the request's (decoded) path or its query holds a NUL
    character, which no name the service keeps can hold."""
    if scope["type"] != "http":
        return None
    if "\0" in scope.get("path", ""):
        return "path"
    return "query" if b"%00" in scope.get("query_string", b"") else None


class BodyLimits:
    """ASGI middleware bounding request bodies (module doc)."""

    def __init__(self, app: Any, limits: LimitsConfig) -> None:
        self.app = app
        self.limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        where = _nul_in(scope)
        if where is not None:  # (PostgreSQL: a query with it failed as a "database down" 503)
            await send_error(send, 422, f"{where}: holds a NUL character (%00)")
            return
        if scope["type"] != "http" or scope.get("method") not in BODY_METHODS:
            await self.app(scope, receive, send)  # a GET's body is never read
            return
        from merkat.service.files_api import is_upload, upload_limit

        limit = upload_limit(scope, "/api/v1", self.limits.body_bytes)  # uploads: max_file
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        length = headers.get(b"content-length")
        deadline = time.monotonic() + self.limits.header_timeout
        if length is not None and length.strip().isdigit() and int(length) > limit:
            if headers.get(b"expect", b"").lower() != b"100-continue":  # the body is coming
                await self._drain(receive, deadline, int(length))
            await send_error(send, 413, f"body: larger than {limit} bytes")
            return
        if is_upload(scope, "/api/v1"):  # streamed to its file, never held whole here
            await self.app(scope, self._streamed(scope, receive, limit, deadline), send)
            return
        if length is None and b"transfer-encoding" not in headers:
            await self.app(scope, receive, send)  # no body (GET ...)
            return
        chunks: list[bytes] = []
        size = 0
        more = True
        while more:
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                await send_error(send, 408, "body: not received within "
                                 f"{self.limits.header_timeout:g} s", close=True)
                return
            if msg["type"] == "http.disconnect":
                return
            chunk = msg.get("body", b"")
            size += len(chunk)
            if size > limit:
                chunks.clear()
                if more:
                    await self._drain(receive, deadline, DRAIN_FACTOR * limit)
                await send_error(send, 413, f"body: larger than {limit} bytes")
                return
            chunks.append(chunk)
            more = bool(msg.get("more_body", False))
        body = b"".join(chunks)
        kind = _json_type(headers.get(b"content-type", b"").decode("latin-1"))
        if body.strip() and kind is not False:
            try:
                load_json(body, self.limits)
            except InputError as exc:
                if kind or not str(exc).startswith("not valid JSON"):
                    await send_error(send, 422, f"body: {exc}")
                    return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _streamed(self, scope: Scope, receive: Receive, limit: int, deadline: float) -> Receive:
        """An upload's ``receive``: its body passed on as it comes, not buffered (buffered, a
        64 MB upload held ~175 MB of the server's memory, and one tenant's uploads at once its
        whole memory), within ``limit`` bytes and by ``deadline``. Past either the app reads a
        disconnect, and ``scope["merkat.body"]`` says why (``size``: the rest of the body is
        read and dropped first, as for any refused body; ``timeout``)."""
        seen, done = 0, False

        async def wrapped() -> Message:
            nonlocal seen, done
            if done:  # the body has been read: what comes now is the client's disconnect
                return await receive()
            try:
                msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
            except TimeoutError:
                scope["merkat.body"], done = "timeout", True
                return {"type": "http.disconnect"}
            seen += len(msg.get("body", b""))
            done = msg["type"] != "http.request" or not msg.get("more_body", False)
            if seen > limit:
                if not done:
                    await self._drain(receive, deadline, DRAIN_FACTOR * limit)
                scope["merkat.body"], done = "size", True
                return {"type": "http.disconnect"}
            return msg

        return wrapped

    async def _drain(self, receive: Receive, deadline: float, budget: int) -> None:
        await _drain_body(receive, deadline, min(budget, DRAIN_FACTOR * self.limits.body_bytes))


async def _drain_body(receive: Receive, deadline: float, budget: int) -> None:
    """Read and drop a refused body until its end, ``budget`` bytes or ``deadline``, so that a
    client that sends all of it before reading (urllib, the CLI) reads the 413, not a
    connection reset."""
    seen = 0
    while seen <= budget:
        try:
            msg = await asyncio.wait_for(receive(), max(0.0, deadline - time.monotonic()))
        except TimeoutError:
            return
        seen += len(msg.get("body", b""))
        if msg["type"] != "http.request" or not msg.get("more_body", False):
            return


def install_errors(app: FastAPI, limits: LimitsConfig) -> None:
    """The one error shape on ``app`` (module doc) and :class:`BodyLimits` around it."""
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from starlette.exceptions import HTTPException

    def cut(text: str) -> str:
        return clip(" ".join(str(text).split()), limits.error_chars)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Any, exc: RequestValidationError) -> JSONResponse:
        errs = list(exc.errors())
        first = errs[0] if errs else {"loc": (), "msg": "invalid request"}
        loc = [str(x) for x in first["loc"] if x not in ("body", "query", "path")]
        msg = str(first["msg"]).removeprefix("Value error, ")
        return JSONResponse({"detail": cut(f"{'.'.join(loc) or 'body'}: {msg}"),
                             "errors": [{"type": str(e.get("type", "")),
                                         "loc": [x if isinstance(x, int) else cut(str(x))
                                                 for x in e.get("loc", ())],
                                         "msg": cut(e.get("msg", ""))} for e in errs[:20]]},
                            422)

    @app.exception_handler(HTTPException)
    async def _http(_: Any, exc: HTTPException) -> JSONResponse:
        return JSONResponse({"detail": cut(str(exc.detail))}, exc.status_code,
                            headers=getattr(exc, "headers", None))

    from sqlalchemy.exc import SQLAlchemyError

    from merkat.bank.errors import DatabaseError

    async def _db_down(_: Any, exc: Exception) -> JSONResponse:
        from merkat.service.dbdown import unavailable

        return JSONResponse({"detail": cut(unavailable(exc))}, 503,
                            headers={"Retry-After": "5"})

    # the database fails (merkat.service.dbdown): 503, not a crash
    app.add_exception_handler(SQLAlchemyError, _db_down)
    app.add_exception_handler(DatabaseError, _db_down)

    @app.exception_handler(Exception)
    async def _crash(_: Any, exc: Exception) -> JSONResponse:
        logging.getLogger("merkat.http").error("internal error: %s: %s",
                                               type(exc).__name__, clip(str(exc), 300))
        return JSONResponse({"detail": "internal error"}, 500)

    app.add_middleware(BodyLimits, limits=limits)


# --- connections ---------------------------------------------------------------------------


def raise_nofile() -> int:
    """Raise the soft limit of open files to the hard one; return the soft limit now."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_cap(limits: LimitsConfig) -> int:
    """Open connections allowed: ``limits.connections``, at most the file limit minus
    :data:`FILE_RESERVE` (and a quarter of it for small limits)."""
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY:
        return limits.connections
    return max(8, min(limits.connections, soft - max(FILE_RESERVE, soft // 4)))


def unread(transport: Any) -> int:
    """Bytes that arrived on ``transport``'s socket and the loop has not read yet (the
    kernel's ``FIONREAD``; 0 when it cannot tell): a request on its way, so its connection is
    not idle even though no byte of it was seen."""
    sock = transport.get_extra_info("socket") if transport is not None else None
    if sock is None:
        return 0
    try:
        got = fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0")
    except (OSError, ValueError):
        return 0
    return int(struct.unpack("i", got)[0])


def guarded_protocol(limits: LimitsConfig, cap: int) -> type:
    """uvicorn's h11 protocol with a head timeout and a connection cap (module doc)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    idle: collections.OrderedDict[Any, None] = collections.OrderedDict()

    class Guarded(H11Protocol):
        deadline: asyncio.TimerHandle | None = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._track()
            while len(self.connections) > cap:  # the oldest idle one that has sent nothing
                victim = next((c for c in idle if c is not self
                               and not unread(c.transport)), None)
                if victim is None:
                    break
                victim.expire()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._track()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._track()

        def connection_lost(self, exc: Exception | None) -> None:
            idle.pop(self, None)
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None
            super().connection_lost(exc)

        def _busy(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _track(self) -> None:
            if self.transport is None or self.transport.is_closing():
                idle.pop(self, None)
            elif self._busy():
                idle.pop(self, None)
                if self.deadline is not None:
                    self.deadline.cancel()
                    self.deadline = None
            elif self.deadline is None:  # idle now: the next head is due in time
                idle[self] = None
                self.deadline = self.loop.call_later(limits.header_timeout, self.expire)

        def expire(self) -> None:
            """Close this connection (no request in progress: timed out or evicted)."""
            idle.pop(self, None)
            if self.deadline is not None:
                self.deadline.cancel()
                self.deadline = None
            if not self._busy() and not self.transport.is_closing():
                self.transport.close()

    return Guarded


def uvicorn_options(limits: LimitsConfig) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.Config`` enforcing ``limits`` (raises the file limit)."""
    raise_nofile()
    quiet_logs()
    cap = connection_cap(limits)
    return {"http": guarded_protocol(limits, cap), "backlog": limits.backlog,
            "timeout_keep_alive": max(1, round(limits.keep_alive)),
            "h11_max_incomplete_event_size": 16 * 1024}


class RateLimited(logging.Filter):
    """Let each message through at most once per ``every`` seconds (the first with its
    traceback, the next ones without, counting what was dropped)."""

    def __init__(self, every: float = 10.0) -> None:
        super().__init__()
        self.every = every
        self.seen: dict[str, tuple[float, int]] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = str(record.msg)[:200]
        now = time.monotonic()
        last, dropped = self.seen.get(key, (-1e18, 0))
        if now - last < self.every:
            self.seen[key] = (last, dropped + 1)
            return False
        if len(self.seen) > 1000:
            self.seen.clear()
        self.seen[key] = (now, 0)
        if dropped:
            record.msg = f"{record.msg} (and {dropped} more like it)"
            record.exc_info = None
            record.exc_text = None
        return True


_QUIET = RateLimited()


def quiet_logs() -> None:
    """Rate-limit the loggers a flood of bad connections writes to (idempotent)."""
    for name in ("asyncio", "uvicorn.error", "merkat.http"):
        log = logging.getLogger(name)
        if _QUIET not in log.filters:
            log.addFilter(_QUIET)
