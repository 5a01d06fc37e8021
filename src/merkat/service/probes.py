"""Where and how monitors run (docs/service.md, "Monitors"): outside the manager's lock, in a
few worker threads, each reading within a time limit.

A period (:meth:`Manager.tick <merkat.service.manager.Manager.tick>`) first plans, under the
lock, the readings due (:func:`plan_probes`: every cluster's monitor — a log monitor every
period, or every ``poll`` seconds when its cluster sets one; a command monitor every ``poll``
seconds, never below :data:`~merkat.service.templates.MIN_POLL`; their aggregate is what the
controller sees: :mod:`merkat.service.clusters`), each a
:class:`Probe` holding everything the reading needs; releases the lock; hands them to
:class:`MonitorRunner`'s threads and waits at most :data:`WAIT` seconds for them; then, under
the lock again, takes the readings that arrived (:func:`apply_readings`). A reading still
running is taken by a later period; a platform has at most one reading in flight, an owner at
most :data:`PER_OWNER`, so a slow or hostile monitor delays only its own platform's metrics,
never the period, the API or another user's monitors.

The readings themselves (:func:`take_reading`):

- a **log** monitor matches its regex in RE2 (linear time) over the last 64 KiB of the VM's
  output, or of its ``path`` — relative to the VM's working directory and refused when it
  leads outside it (symbolic links resolved), regular files only;
- a **command** monitor runs ``/bin/sh -c COMMAND`` through the sandbox
  (:func:`merkat.backends.local.sandbox.run`): as the platform owner's host identity, in the
  VM's working directory, inside the VM's cgroup (its CPU, memory and pids limits apply), with
  the VM's clean environment and nothing of the server's, killed with its process group after
  :data:`TIMEOUT` seconds (an event ``monitor-timeout``, not a stall):
  :func:`run_monitor_command`, the one place such a command starts;
- on a backend that runs commands in its VMs (Kubernetes), both run there
  (:func:`~merkat.service.monitors.read_in_vm`), with the same time limit.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from merkat.control.types import VMState
from merkat.service.backends import Monitoring, Remote
from merkat.service.context import ManagerState
from merkat.service.monitors import (
    TAIL_BYTES,
    Ran,
    Reading,
    match_log,
    parse_output,
    read_in_vm,
    read_tail,
)
from merkat.service.templates import Monitor

TIMEOUT = 5.0
"""A command monitor's time limit (s); its process group is killed after it."""

WAIT = 1.0
"""How long a period waits for the readings it started (s; at most a quarter period)."""

WORKERS = 4
"""Threads reading monitors (each reading is bounded: a log tail, or a command with a limit)."""

PER_OWNER = 2
"""Readings of one owner's platforms in flight at once (the others wait for a later period)."""

PATH = "/usr/local/bin:/usr/bin:/bin"


@dataclass(frozen=True)
class Probe:
    """One reading to take outside the lock: everything it needs, copied."""

    key: str  # the platform (one reading in flight per key)
    owner: str
    monitor: Monitor
    vm: str | None  # the monitored VM (None: not started)
    log: str | None = None  # its output (a log monitor without a path)
    cwd: str | None = None  # its working directory
    env: Mapping[str, str] = field(default_factory=dict)
    cgroup_procs: tuple[str, ...] = ()  # its cgroups' cgroup.procs files (a command joins)
    timeout: float = TIMEOUT
    identity: Any = None  # whom a command runs as (sandbox.Identity: the owner's)


class Probing(ManagerState, Protocol):
    """What the probes need of the manager besides its state (:class:`~merkat.service.context.
    ManagerState`): the runner of its monitors (:class:`MonitorRunner`)."""

    @property
    def monitors(self) -> MonitorRunner: ...


def plan_probes(m: Probing, now: float) -> list[Probe]:
    """The readings due at ``now`` (call under the manager's lock): a log monitor's every
    period, a command monitor's every ``poll`` seconds, a running or suspended platform's only;
    a command monitor runs while its VM runs (not suspended, not before it starts)."""
    from merkat.service.clusters import cluster_vm, due, monitors_of, probe_key

    out: list[Probe] = []
    backend = m.backend
    remote = isinstance(backend, Remote)
    for name, live in m.live.items():
        app = m.platform.apps.get(name)
        if app is None or not app.active:
            continue
        t = live.template
        for cluster, mon in monitors_of(t):  # every cluster's (service/clusters.py)
            if mon.kind == "push":
                continue
            key = probe_key(name, t, cluster)
            own = next((c.poll for c in t.clusters if c.name == cluster), None)
            last = live.last_poll if key == name else live.polled.get(cluster, -math.inf)
            if own == 0:
                continue  # its monitor is off (poll: 0, XML poll='no')
            if mon.kind == "command" or own is not None:
                poll = own if own is not None else t.poll
                if not due(last, poll, now, m.config.period):
                    continue
            vm = backend.monitored.get(name) if key == name else cluster_vm(m, name, t, cluster)
            up = any(r.id == vm and r.state is not VMState.SUSPENDED for r in app.records())
            if mon.kind == "command" and not up:  # (its poll counts from its first reading)
                continue
            ident = None
            if mon.kind == "command" and not remote:
                try:
                    ident = m.tenants.identity(live.owner)
                except ValueError:  # no identity: the command never runs as the server
                    continue
            if key == name:
                live.last_poll = now
            else:
                live.polled[cluster] = now
            ctx: dict[str, Any] = {}
            if vm is not None and isinstance(backend, Monitoring):
                ctx = backend.monitor_context(vm) or {}
            log = backend.log_path(vm) if vm and not remote else None
            out.append(Probe(key, live.owner, mon, vm if (up or not remote) else None, log,
                             ctx.get("cwd"), dict(ctx.get("env", {})),
                             tuple(ctx.get("cgroup_procs", ())), TIMEOUT, ident))
    return out


def take_reading(backend: Any, p: Probe) -> Reading:
    """Read ``p`` (module doc); never raises: a failure is the reading's ``error``."""
    mon = p.monitor
    remote = read_in_vm(backend, p.vm, mon, p.timeout)
    if remote is not None:  # in a pod
        return remote
    if mon.kind == "log":
        path: str | None = p.log
        if mon.path:
            path = inside(p.cwd, mon.path)
            if path is None:
                return Reading({}, f"path {mon.path!r} is not a file in the VM's working "
                                   "directory")
        if not path:
            return Reading({})
        # a path in her working directory is opened without following a link (she may
        # swap one of its directories for a link to /etc between inside() and the read)
        text = read_tail(Path(path), resolved=bool(mon.path))
        return Reading(match_log(text, mon.regex or ""))
    if mon.kind == "command":
        ran = run_monitor_command(mon.command or "", p)
        if ran.timed_out:
            return Reading({}, f"timed out after {p.timeout:g} s (killed)", timed_out=True)
        if ran.error is not None:
            return Reading({}, ran.error)
        values = parse_output(ran.stdout)
        if ran.code not in (0, None):
            return Reading(values, f"exit status {ran.code}")
        return Reading(values)
    return Reading({})


def inside(cwd: str | None, path: str) -> str | None:
    """``path`` resolved against ``cwd`` (symbolic links followed), or None when it leads
    outside ``cwd`` (or there is none)."""
    if not cwd:
        return None
    base = os.path.realpath(cwd)
    full = os.path.realpath(os.path.join(base, path))
    return full if full.startswith(base + os.sep) else None


def run_monitor_command(command: str, p: Probe) -> Any:
    """THE start of a command monitor: ``/bin/sh -c command`` through the sandbox
    (:func:`merkat.backends.local.sandbox.run`) as ``p.identity``, in the VM's working
    directory (its owner's work area before it has one) and cgroup, with the VM's clean
    environment (:func:`~merkat.backends.local.sandbox.clean_env`), killed with its process
    group after ``p.timeout`` s, at most 64 KiB of its output read; a :class:`Ran`."""
    from merkat.backends.local.sandbox import clean_env, run

    home = str(p.identity.home) if p.identity is not None else None
    cwd = p.cwd if p.cwd and os.path.isdir(p.cwd) else home
    r = run(["/bin/sh", "-c", command], p.identity, cgroups=p.cgroup_procs,
            env=clean_env(p.identity, p.env), cwd=cwd, timeout=p.timeout, limit=TAIL_BYTES)
    return Ran(r.stdout, r.returncode, r.timed_out,
               None if r.timed_out or r.returncode is not None else r.error)


class MonitorRunner:
    """The worker threads of the monitors (module doc). ``clock`` stamps each reading with
    the time it was taken."""

    def __init__(self, backend: Any, clock: Callable[[], float] = time.time,
                 workers: int = WORKERS, per_owner: int = PER_OWNER) -> None:
        self.backend = backend
        self.clock = clock
        self.per_owner = per_owner
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="merkat-monitor")
        self._lock = threading.Lock()
        self.running: dict[str, tuple[str, Future[None]]] = {}  # key -> (owner, its future)
        self.done: dict[str, tuple[Reading, float]] = {}  # key -> (reading, taken at)
        self.turn: dict[str, int] = {}  # key -> when its last reading started (a counter)
        self._turns = 0
        self.closed = False

    def start(self, probes: Iterable[Probe]) -> list[Future[None]]:
        """Start the readings of ``probes`` (skipped: one of the same key still in flight,
        or its owner's quota in flight), the longest unread first (an owner with more
        platforms than her quota has each read in turn); returns their futures."""
        started: list[Future[None]] = []
        with self._lock:
            if self.closed:
                return started
            owners = Counter(owner for owner, _ in self.running.values())
            for p in sorted(probes, key=lambda p: self.turn.get(p.key, -1)):
                if p.key in self.running or owners[p.owner] >= self.per_owner:
                    continue
                owners[p.owner] += 1
                self._turns += 1
                self.turn[p.key] = self._turns
                fut = self.pool.submit(self._read, p)
                self.running[p.key] = (p.owner, fut)
                started.append(fut)
        return started

    def _read(self, p: Probe) -> None:
        try:
            reading = take_reading(self.backend, p)
        except Exception as exc:  # a bug, as data: the period goes on
            reading = Reading({}, f"monitor failed: {type(exc).__name__}: {exc}")
        with self._lock:
            self.done[p.key] = (reading, self.clock())
            self.running.pop(p.key, None)

    def wait(self, futures: list[Future[None]], timeout: float) -> None:
        """Wait at most ``timeout`` s for ``futures`` (those not done are taken later)."""
        if futures:
            wait_futures(futures, timeout)

    def take(self) -> dict[str, tuple[Reading, float]]:
        """The readings finished since the last call, by key, with the time each was taken."""
        with self._lock:
            out, self.done = self.done, {}
        return out


    def close(self) -> None:
        """Stop taking readings (those running finish within their time limits)."""
        with self._lock:
            self.closed = True
        self.pool.shutdown(wait=False, cancel_futures=True)


def probe_monitors(m: Probing) -> None:
    """Plan the due readings under ``m``'s lock, then start them and wait for them (at most
    :data:`WAIT` s, or a quarter period) without it (module doc)."""
    with m.lock:
        probes = plan_probes(m, m.clock())
    futures = m.monitors.start(probes)
    m.monitors.wait(futures, min(WAIT, m.config.period / 4))


def apply_readings(m: Probing) -> None:
    """Take the finished readings into the platforms' metrics (under ``m``'s lock): an event
    when a monitor's error changes (``monitor-timeout`` for a reading killed at its time
    limit, else ``monitor-error``); then every platform's metrics go to the backend."""
    from merkat.service.clusters import heartbeat, platform_metrics, tracker_of

    for key, (reading, at) in m.monitors.take().items():
        name, _, cluster = key.partition("/")
        live = m.live.get(name)
        if live is None:
            continue
        cluster = cluster or live.template.monitored.name
        tracker = tracker_of(live, cluster)
        tracker.update(reading.values, at)
        before = live.monitor_error if key == name else live.errors.get(cluster)
        if reading.error is not None and reading.error != before:
            kind = "monitor-timeout" if reading.timed_out else "monitor-error"
            which = f" (cluster {cluster})" if key != name else ""
            m._event(kind, f"monitor of {name}{which}: {reading.error}", name)
        if key == name:
            live.monitor_error = reading.error
        else:
            live.errors[cluster] = reading.error
        heartbeat(m, name, live, cluster, tracker.metrics(), at)
    for name, live in m.live.items():
        m.backend.set_metrics(name, platform_metrics(live))  # every cluster's, aggregated
