"""Running the service: the store, the backend, the applications manager's loop and uvicorn
in one process (``merkat server``).

:class:`Service` builds everything from a :class:`~merkat.service.config.ServiceConfig`;
:meth:`Service.serve` blocks until SIGINT/SIGTERM (uvicorn's handlers), then stops the loop
and destroys the VMs. :meth:`Service.start_background` runs the same in threads (the demo and
the end-to-end tests), :meth:`Service.shutdown` ends it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from merkat.service.config import ServiceConfig


class ServiceError(RuntimeError):
    """The service cannot start (the port is taken...): one line."""


def log(message: str) -> None:
    """One line on stderr, timestamped (the server's log)."""
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


def describe_period(rec: dict[str, Any]) -> str:
    p = rec["prices"]
    return (f"period {rec['index']}: price cpu {p.get('cpu', 0):.4g} memory "
            f"{p.get('memory', 0):.4g} per unit; {rec['vms']} VMs; charged {rec['charged']:.4g}")


class Service:
    """The live service of one config (module doc)."""

    def __init__(self, config: ServiceConfig,
                 on_period: Callable[[dict[str, Any]], None] | None = None,
                 app: Callable[[Any], Any] | None = None) -> None:
        """``app(manager)`` makes the ASGI app served (default: the REST API alone,
        :func:`merkat.service.api.create_app`; ``merkat server`` hands over
        :func:`merkat.web.app.create_app`, the API with the dashboard and ``/metrics``)."""
        from merkat.service.api import create_app
        from merkat.service.backends import make_backend
        from merkat.service.db import StoreError, open_store, private_dir
        from merkat.service.lock import DataDirLock, LockedError
        from merkat.service.manager import Manager

        self.config = config
        self.sock: Any = None
        # Nothing is created before the port is ours and the data directory is free: a
        # failed start leaves no database behind (an existing directory is locked first, so
        # a second server there is told so rather than that the port is taken).
        self.lock = DataDirLock(config.data_dir)
        existed = config.data_dir.is_dir()
        try:
            if existed:
                self.lock.acquire()
            self.sock = self._bind()
            private_dir(config.data_dir)  # 0700, whatever the umask
            self.lock.acquire()
            self.store = open_store(config.database)
            try:
                self.backend = make_backend(config)
                self.manager = Manager(config, self.store, self.backend)
            except BaseException:
                self.store.close()
                raise
        except (LockedError, StoreError) as exc:
            self._release()
            raise ServiceError(str(exc)) from None
        except BaseException:
            self._release()
            if not existed:  # a failed start leaves no new directory (database) behind
                import shutil

                shutil.rmtree(config.data_dir, ignore_errors=True)
            raise
        self.app = (app or create_app)(self.manager)
        self.on_period = on_period or (lambda rec: log(describe_period(rec)))
        self.stop_event = threading.Event()
        self.loop: threading.Thread | None = None
        self.server: Any = None
        self.http: threading.Thread | None = None

    def banner(self) -> str:
        b = self.backend
        enforcement = getattr(b, "label", None) or (
            f"cgroups {getattr(getattr(b, 'tree', None), 'version', '')} enforced"
            if b.enforced else "UNENFORCED")
        nodes = ", ".join(
            f"{n.name} ({n.cpus}: {getattr(n, 'allocatable_cores', n.cores):g} of {n.cores:g} "
            f"cores, {getattr(n, 'allocatable_memory', n.memory):.0f} MiB)" for n in b.node_list())
        cap = getattr(b, "capacity", None)
        reserve = (f"; capacity {cap.cpu:g} cores, {cap.memory:.0f} MiB, reserved "
                   f"{cap.reserve_cpu:g} cores, {cap.reserve_memory:.0f} MiB, allocatable "
                   f"{cap.allocatable_cpu:g} cores, {cap.allocatable_memory:.0f} MiB (under "
                   f"cgroup {self.config.backend.cgroup_prefix})") if cap is not None else ""
        return (f"merkat server on http://{self.config.host}:{self.port} — period "
                f"{self.config.period:g} s, admission {self.config.admission:g} s, "
                f"{enforcement}{reserve}; users' commands "
                f"{'each as her own uid' if self.manager.tenants.switching else 'AS THE SERVER'}"
                f" (work areas in {self.config.work_root}); nodes: {nodes}; data: {self.config.data_dir}")

    @property
    def port(self) -> int:
        sock = self.sock
        return int(sock.getsockname()[1]) if sock is not None and sock.fileno() >= 0 \
            else self.config.port

    def _bind(self) -> Any:
        """The listening socket, bound now (a taken port is one clear error)."""
        import socket

        host, port = self.config.host, self.config.port
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            # IPPROTO_TCP named, not 0: asyncio sets TCP_NODELAY only on accepted sockets whose
            # proto says TCP, and without it a response written in two parts (head, body) waits
            # for the client's delayed ACK: ~40 ms per request on a keep-alive connection.
            sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
        except OSError as exc:
            raise ServiceError(f"cannot listen on {host}:{port}: "
                               f"{exc.strerror or exc}") from None
        return sock

    def _release(self) -> None:
        """Give back the socket and the data directory's lock (a failed start, a stop)."""
        if self.sock is not None:
            self.sock.close()
        self.lock.release()

    def _uvicorn(self) -> Any:
        """The uvicorn server on the socket bound at construction."""
        import uvicorn

        from merkat.service.http import uvicorn_options

        cfg = uvicorn.Config(self.app, host=self.config.host, port=self.config.port,
                             log_level="warning", access_log=False,
                             **uvicorn_options(self.config.limits))
        self.server = uvicorn.Server(cfg)
        return self.server

    def _start_loop(self) -> None:
        self.loop = threading.Thread(target=self.manager.run, name="merkat-period",
                                     args=(self.stop_event, self.on_period), daemon=True)
        self.manager.health.thread = self.loop  # /health reports a loop that is gone
        self.loop.start()
        from pathlib import Path

        from merkat.service.logtail import LOG_CHECK, LogCap

        capper = LogCap(Path(self.config.data_dir) / "logs", self.config.limits.log_bytes)
        threading.Thread(target=capper.run, args=(self.stop_event, LOG_CHECK),
                         name="merkat-logcap", daemon=True).start()

    def serve(self) -> None:
        """Serve until interrupted, then stop the loop and destroy the VMs."""
        server = self._uvicorn()
        log(self.banner())
        for warning in (self.backend.warning, self.manager.tenants.warning):
            if warning:
                log(f"warning: {warning}")
        self._start_loop()
        try:
            server.run(sockets=[self.sock])
        finally:
            self.shutdown()

    def start_background(self, timeout: float = 10.0) -> None:
        """Start uvicorn and the loop in threads; return once the server listens."""
        server = self._uvicorn()
        server.install_signal_handlers = lambda: None  # not the main thread
        self.http = threading.Thread(target=server.run, kwargs={"sockets": [self.sock]},
                                     name="merkat-http", daemon=True)
        self.http.start()
        end = time.monotonic() + timeout
        while not server.started:
            if time.monotonic() > end or not self.http.is_alive():
                raise RuntimeError(f"the server did not start on {self.config.host}:"
                                   f"{self.config.port}")
            time.sleep(0.02)
        self._start_loop()

    def shutdown(self) -> None:
        """Stop the loop, the HTTP server and every VM (idempotent)."""
        self.stop_event.set()
        if self.server is not None:
            self.server.should_exit = True
        if self.loop is not None:
            self.loop.join(timeout=30)
        if self.http is not None:
            self.http.join(timeout=10)
        self.manager.close()
        self._release()
