"""The emulator's ``pods/{name}/exec``: a WebSocket session run by a real subprocess.

The API server answers ``GET .../pods/{name}/exec?command=...&stdout=true&stderr=true`` (with
``Upgrade: websocket`` and the subprotocols ``v5.channel.k8s.io``, ``v4.channel.k8s.io``) with
``101 Switching Protocols`` and then relays the container's streams, each binary message
prefixed by its channel byte: 0 stdin (client to server), 1 stdout, 2 stderr, 3 the final
``Status`` (JSON: ``Success``, or ``Failure`` with reason ``NonZeroExitCode`` and the exit code
in ``details.causes``), 4 terminal resize; ``v5`` adds 255 (close a stream: ``255 0`` closes
stdin). The server closes the WebSocket after the status.

:class:`ExecSession` is that far end for the emulator: the command runs for real in a
subprocess on this machine (the emulator's stand-in for the pod's container) with the pod's
environment, its output is relayed as it comes (at most :data:`CHUNK` bytes a message), and
the session is the ``network_stream`` an ``httpx2`` transport hands to the client's WebSocket
session (the same object serves :func:`~merkat.backends.kubernetes.emulator.serve`'s real
sockets). A client that closes the WebSocket (a timeout) kills the process.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import threading
from collections.abc import Callable, Sequence
from typing import IO, Any

import httpx2
import wsproto
import wsproto.connection
import wsproto.events

PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR = 0, 1, 2, 3
CLOSE_STREAM = 255  # v5 only
CHUNK = 16_384


def status_of(code: int | None, start_error: str = "") -> dict[str, Any]:
    """The channel-3 ``Status`` the kubelet sends when the command ends with ``code`` (``None``:
    it could not start, ``start_error`` says why)."""
    if code == 0:
        return {"metadata": {}, "status": "Success"}
    if code is None:
        msg = ("OCI runtime exec failed: exec failed: unable to start container process: "
               f"{start_error}: unknown")
        return {"metadata": {}, "status": "Failure", "message": msg, "reason": "InternalError",
                "details": {"causes": [{"message": msg}]}, "code": 500}
    return {"metadata": {}, "status": "Failure",
            "message": f"command terminated with non-zero exit code: exit status {code}",
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]}}


class ExecSession:
    """The server end of one exec WebSocket (module doc): ``read``/``write``/``close`` as an
    ``httpcore`` network stream. ``on_exit(code)`` is told the exit code (None: not started,
    or killed because the client went away)."""

    def __init__(self, argv: Sequence[str], *, env: dict[str, str], cwd: str, protocol: str,
                 stdin: bool, limit_s: float = 60.0,
                 on_exit: Callable[[int | None], None] = lambda code: None) -> None:
        self.protocol = protocol
        self.conn = wsproto.connection.Connection(wsproto.ConnectionType.SERVER)
        self.out: queue.Queue[bytes | None] = queue.Queue()
        self._buf = b""
        self._lock = threading.Lock()
        self._closed = False
        self._limit_s = limit_s
        self._on_exit = on_exit
        try:
            self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
                list(argv), stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, cwd=cwd,
                start_new_session=True)
        except OSError as e:
            self.proc = None
            name = argv[0] if argv else ""
            reason = (f'exec: "{name}": executable file not found in $PATH'
                      if isinstance(e, FileNotFoundError) else f"{type(e).__name__}: {e}")
            self._end(None, status_of(None, reason))
            return
        proc = self.proc
        assert proc.stdout is not None and proc.stderr is not None
        readers = [threading.Thread(target=self._pump, args=(stream, ch), daemon=True)
                   for stream, ch in ((proc.stdout, STDOUT), (proc.stderr, STDERR))]
        for t in readers:
            t.start()
        threading.Thread(target=self._wait, args=(readers,), daemon=True).start()

    # --- the container's side ------------------------------------------------------------

    def _pump(self, stream: IO[bytes], channel: int) -> None:
        with contextlib.suppress(OSError, ValueError):
            while data := os.read(stream.fileno(), CHUNK):
                self._send(bytes((channel,)) + data)

    def _wait(self, readers: list[threading.Thread]) -> None:
        assert self.proc is not None
        try:
            code: int | None = self.proc.wait(timeout=self._limit_s)
        except subprocess.TimeoutExpired:
            self._kill()
            code = None
        for t in readers:
            t.join(timeout=5.0)
        if code is not None and code < 0:  # killed by a signal: the shell's 128 + n
            code = 128 - code
        self._end(code, status_of(code) if code is not None else status_of(
            None, f"killed after the emulator's {self._limit_s:g} s limit"))

    def _end(self, code: int | None, status: dict[str, Any]) -> None:
        self._send(bytes((ERROR,)) + json.dumps(status).encode())
        with self._lock:
            if not self._closed:
                self.out.put(self.conn.send(wsproto.events.CloseConnection(1000)))
        self._on_exit(code if not self._closed else None)

    def _send(self, message: bytes) -> None:
        with self._lock:
            if not self._closed and self.conn.state is wsproto.connection.ConnectionState.OPEN:
                self.out.put(self.conn.send(wsproto.events.BytesMessage(message)))

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)

    # --- the network stream the client's WebSocket session reads and writes --------------

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        if not self._buf:
            item = self.out.get(timeout=timeout)
            if item is None:
                self.out.put(None)
                return b""
            self._buf = item
        data, self._buf = self._buf[:max_bytes], self._buf[max_bytes:]
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        stdin: list[bytes | None] = []
        with self._lock:
            if self._closed:
                return
            self.conn.receive_data(buffer)
            for event in self.conn.events():
                if isinstance(event, wsproto.events.BytesMessage) and event.data:
                    data = bytes(event.data)
                    if data[0] == STDIN:
                        stdin.append(data[1:])
                    elif (data[0] == CLOSE_STREAM and data[1:2] == bytes((STDIN,))
                          and self.protocol.startswith("v5.")):
                        stdin.append(None)
                elif isinstance(event, wsproto.events.Ping):
                    self.out.put(self.conn.send(event.response()))
                elif isinstance(event, wsproto.events.CloseConnection):
                    if self.conn.state is wsproto.connection.ConnectionState.REMOTE_CLOSING:
                        self.out.put(self.conn.send(event.response()))
                    self._closed = True
                    self.out.put(None)
        for chunk in stdin:
            self._stdin(chunk)
        if self._closed:
            self._kill()

    def _stdin(self, chunk: bytes | None) -> None:
        pipe = self.proc.stdin if self.proc is not None else None
        if pipe is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if chunk is None:
                pipe.close()
            else:
                pipe.write(chunk)
                pipe.flush()

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self.out.put(None)
        self._kill()


def accept(request: httpx2.Request, protocols: Sequence[str]) -> tuple[str, list[tuple[str, str]]]:
    """Check the WebSocket upgrade of ``request``; the subprotocol chosen (the client's first
    that ``protocols`` has) and the ``101`` response headers. ``ValueError``: not an upgrade, or
    no common subprotocol."""
    h = request.headers
    if "websocket" not in h.get("upgrade", "").lower() or "sec-websocket-key" not in h:
        raise ValueError("Upgrade request required")
    offered = [p.strip() for p in h.get("sec-websocket-protocol", "").split(",") if p.strip()]
    chosen = next((p for p in offered if p in protocols), None)
    if chosen is None:
        raise ValueError(f"none of the subprotocols {offered} is supported "
                         f"(the server speaks {', '.join(protocols)})")
    hs = wsproto.WSConnection(wsproto.ConnectionType.SERVER)
    hs.receive_data(_request_bytes(request))
    next(iter(hs.events()))
    reply = hs.send(wsproto.events.AcceptConnection(subprotocol=chosen)).decode()
    headers = [(k, v) for k, v in (line.split(": ", 1) for line in reply.splitlines()[1:]
                                   if ": " in line)]
    return chosen, headers


def _request_bytes(request: httpx2.Request) -> bytes:
    target = request.url.raw_path.decode()
    lines = [f"GET {target} HTTP/1.1", f"host: {request.url.host or 'emulator'}"]
    lines += [f"{k}: {v}" for k, v in request.headers.items() if k.lower() != "host"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()
