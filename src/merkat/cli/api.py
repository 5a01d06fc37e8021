"""The server's REST API as the client commands reach it: :class:`Client` (``/api/v1``, the
API key as a bearer token, JSON in and out) and the ``--url`` / ``--token`` options.

``MERKAT_URL`` (default ``http://127.0.0.1:8080``) says where, ``MERKAT_TOKEN`` who. Every
failure exits with a one-line error: 2 on a 4xx (the server's reason), 1 when the server
cannot be reached or fails. Only the standard library is imported (``urllib``): the commands
start fast. The commands themselves are in :mod:`merkat.cli.client` (platforms, prices, nodes,
accounts), :mod:`merkat.cli.platforms` and :mod:`merkat.cli.files`.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import Any, BinaryIO

import typer

from merkat.cli._common import EXIT_BAD_INPUT, EXIT_FAILURE, fail

DEFAULT_URL = "http://127.0.0.1:8080"

UrlOption = typer.Option(None, "--url", help="Server URL (default: $MERKAT_URL, else "
                         f"{DEFAULT_URL}).")
TokenOption = typer.Option(None, "--token", help="API key (default: $MERKAT_TOKEN).")


_TOKEN = re.compile(r"[!-~]+")  # what an HTTP header can carry, whatever the key's owner typed
_HOST = re.compile(r"[A-Za-z0-9._~%:\[\]-]+")  # a host, an IPv6 address in brackets


def check_url(url: str) -> None:
    """Exit 2, naming ``--url``, when ``url`` is no ``http(s)://HOST[:PORT][/PATH]`` a request
    can go to: a port out of range or not a number, an unclosed IPv6 bracket, spaces or
    control characters (urllib's ValueError or InvalidURL, an internal error), a user and
    password (urllib cannot send them, and every error would print the password)."""
    expected = f"--url: expected http://HOST:PORT, got {url!r}"
    if not url.startswith(("http://", "https://")) or not url.isascii() \
            or not url.isprintable() or " " in url:
        fail(expected)
    try:
        u = urllib.parse.urlsplit(url)
        u.port  # noqa: B018 (a port that is no number, or out of range, raises ValueError)
    except ValueError as exc:
        fail(f"{expected} ({exc})")
    if "@" in u.netloc:
        fail("--url: a user or password in the URL is not supported (the API key is --token)")
    if not u.hostname or not _HOST.fullmatch(u.netloc) or u.query or u.fragment:
        fail(expected)


class Client:
    """A minimal JSON client of the API; every failure exits with a one-line error."""

    def __init__(self, url: str | None, token: str | None) -> None:
        self.url = (url or os.environ.get("MERKAT_URL") or DEFAULT_URL).rstrip("/")
        self.token = (token or os.environ.get("MERKAT_TOKEN") or "").strip()  # as the server
        check_url(self.url)
        if self.token and not _TOKEN.fullmatch(self.token):  # a header cannot carry it
            fail("--token: not an API key: it holds a space, a control or a non-ASCII character "
                 "(a key is as `merkat user add` prints it); check MERKAT_TOKEN")

    def request(self, method: str, path: str, body: bytes | None = None,
                ctype: str = "application/json", raw: bool = False,
                timeout: float = 30.0) -> Any:
        import urllib.error
        import urllib.request

        if not self.token:
            fail("no API key: set MERKAT_TOKEN (printed by `merkat user add`) or pass --token")
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        if body is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                data = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            fail(detail, EXIT_FAILURE if exc.code >= 500 else EXIT_BAD_INPUT)
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            fail(f"cannot reach the merkat server at {self.url} ({reason}); is `merkat server` "
                 "running? (MERKAT_URL)", EXIT_FAILURE)
        return data.decode(errors="replace") if raw else json.loads(data or b"null")

    def upload(self, path: str, f: BinaryIO, size: int, timeout: float = 300.0) -> Any:
        """``PUT`` the ``size`` bytes of the open file ``f`` as they are read (never whole in
        memory: ``merkat submit /dev/zero``'s kind of input cannot exhaust the machine), asking
        first (``Expect: 100-continue``): a refusal (413 over ``tenants.max_file``, 401, 422)
        comes before the body, and its reason is printed — sent anyway, a body past what the
        server drains was a connection reset, "cannot reach the merkat server"."""
        import http.client
        import select
        import socket

        if not self.token:
            fail("no API key: set MERKAT_TOKEN (printed by `merkat user add`) or pass --token")
        u = urllib.parse.urlsplit(self.url)
        tls = u.scheme == "https"
        conn = (http.client.HTTPSConnection if tls else http.client.HTTPConnection)(
            u.hostname or "127.0.0.1", u.port, timeout=timeout)
        try:
            conn.putrequest("PUT", f"{u.path}/api/v1{path}")
            for k, v in (("Authorization", f"Bearer {self.token}"), ("Content-Length", str(size)),
                         ("Content-Type", "application/octet-stream"),
                         *([] if tls else [("Expect", "100-continue")])):
                conn.putheader(k, v)
            conn.endheaders()
            sock = conn.sock
            send = True
            if not tls and select.select([sock], [], [], 3.0)[0]:  # the server answered
                head = sock.recv(64, socket.MSG_PEEK)
                if head.split(b" ", 2)[1:2] == [b"100"]:  # go on: read the interim answer
                    seen = b""
                    while not seen.endswith(b"\r\n\r\n"):
                        seen += sock.recv(1)
                else:  # its final answer, before the body
                    send = False
            if send:
                while chunk := f.read(1 << 16):
                    conn.send(chunk)
            resp = conn.getresponse()
            data = resp.read()
        except OSError as exc:
            fail(f"cannot reach the merkat server at {self.url} ({exc}); is `merkat server` "
                 "running? (MERKAT_URL)", EXIT_FAILURE)
        finally:
            conn.close()
        if resp.status >= 400:
            from types import SimpleNamespace

            err = SimpleNamespace(code=resp.status, reason=resp.reason, read=lambda: data)
            fail(_detail(err), EXIT_FAILURE if resp.status >= 500 else EXIT_BAD_INPUT)
        return json.loads(data or b"null")

    def get(self, path: str, **params: Any) -> Any:
        q = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path + (f"?{urllib.parse.urlencode(q)}" if q else ""))

    def post(self, path: str, data: Any = None) -> Any:
        return self.request("POST", path, json.dumps(data or {}).encode())


def _detail(exc: Any) -> str:
    """The one-line reason of an HTTP error (the API's ``detail``)."""
    try:
        body = json.loads(exc.read() or b"{}")
        detail = body.get("detail") if isinstance(body, dict) else None
    except (ValueError, OSError):
        detail = None
    if exc.code == 401:
        return f"the server refused the API key ({detail or 'unauthorized'}): check MERKAT_TOKEN"
    return str(detail or f"HTTP {exc.code} {exc.reason}")


PLATFORM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
"""A platform's name (``merkat.service.templates.NAME``, repeated: the client commands import
only the standard library; ``tests/test_cli_papercuts.py`` keeps the two equal)."""


def _q(name: str) -> str:
    """``name`` as one segment of a URL's path. An empty name, or one with ``/`` (the server
    decodes ``%2F`` before it routes), can name nothing there: bad input, exit 2 (it reached
    another route: ``KeyError: 'state'``, ``Not Found``, ``HTTP 307``)."""
    if not name or "/" in name:
        fail(f"NAME: {name!r} names nothing on the server (an empty name, or one with '/')")
    return urllib.parse.quote(name, safe="")


def platform_path(name: str) -> str:
    """``/platforms/NAME``, or exit 2 when ``name`` cannot be a platform's name."""
    if not PLATFORM_NAME.match(name):
        fail(f"NAME: {name!r} is not a platform name (1-63 of A-Z a-z 0-9 _.-, starting with "
             "a letter or a digit)")
    return f"/platforms/{_q(name)}"
