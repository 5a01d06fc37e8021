"""The API emulator served over plain HTTP on a real socket (``merkat kubernetes emulator``, and
the tests that run ``merkat server --backend kubernetes`` in its own process).

Every request goes through the handler it is handed (the emulator's
:meth:`~merkat.backends.kubernetes.emulator.KubeEmulator.handle`; this layer knows nothing
else of the emulator) under one lock; an exec request that it
answers ``101 Switching Protocols`` is then relayed between the socket and the session
(:class:`~merkat.backends.kubernetes.emulator_exec.ExecSession`) outside the lock, so the
client's real WebSocket stack (``httpx2`` over TCP) talks to the command's subprocess.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx2


def serve(handle: Callable[[httpx2.Request], httpx2.Response], host: str = "127.0.0.1",
          port: int = 0) -> Any:
    """Serve ``handle`` (an emulator's ``handle``) over plain HTTP (a ``ThreadingHTTPServer``, not yet started: call
    ``serve_forever``); its kubeconfig is :func:`~merkat.backends.kubernetes.emulator.kubeconfig`
    with ``server`` the returned server's ``url`` attribute. For trying ``merkat server --backend
    kubernetes`` without a cluster (``merkat kubernetes emulator``)."""
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _any(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(n) if n else b""
            url = f"http://{self.headers.get('host', 'emulator')}{self.path}"
            req = httpx2.Request(self.command, url, headers=dict(self.headers.items()),
                                 content=body)
            with lock:
                resp = handle(req)
            if resp.status_code == 101:
                self._relay(resp)
                return
            data = resp.content
            self.send_response(resp.status_code)
            self.send_header("content-type", resp.headers.get("content-type",
                                                              "application/json"))
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _relay(self, resp: httpx2.Response) -> None:
            """The WebSocket after the upgrade: session → socket in a thread, socket → session
            here, until either side closes."""
            stream = resp.extensions["network_stream"]
            self.send_response(101)
            for k, v in resp.headers.items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.flush()
            self.close_connection = True

            def outbound() -> None:
                with contextlib.suppress(OSError):
                    while data := stream.read(65_536):
                        self.wfile.write(data)
                        self.wfile.flush()
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_WR)

            sender = threading.Thread(target=outbound, daemon=True)
            sender.start()
            with contextlib.suppress(OSError, ValueError):
                while data := self.rfile.read1(65_536):
                    stream.write(data)
            stream.close()
            sender.join(timeout=5.0)

        do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _any

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.url = f"http://{host}:{server.server_address[1]}"  # type: ignore[attr-defined]
    server.lock = lock  # type: ignore[attr-defined]  # hold it to read the emulator's state
    return server
