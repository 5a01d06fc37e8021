"""Monitors (Merkat §4.2.3): a platform's progress as :class:`~merkat.control.types.Metrics`.

A monitor reads raw values — the last match of a regex in a log file, the ``key=value`` or
JSON output of a command, or the values pushed to ``POST .../platforms/{name}/metrics`` — and
:class:`MetricsTracker` turns successive readings into metrics, adding the measured progress
rate (work units per second between two readings whose work differs).

Regexes run in RE2 (``google-re2``), whose matching time is linear in the text whatever the
pattern: ``(a+)+$`` over a log of ``aaaa...!`` lines costs what a plain pattern does. A
pattern RE2 does not support (backreferences, lookaround) is refused at submit
(:func:`merkat.service.patterns.compile_regex`). Log files are read from their last 64 KiB, regular files only (a FIFO
or a device never blocks a reader). Commands run with a time limit, their process group
killed after it, their output read up to 64 KiB
(:func:`merkat.service.probes.run_monitor_command`, through the sandbox).

Where a monitor runs: on the machine for the local backend; inside the monitored VM when the
backend runs commands there (it has ``exec_in(vm, command, timeout)`` and ``log_text(vm)``: the
Kubernetes backend, through ``pods/{name}/exec`` and ``pods/{name}/log``), so templates are the
same for both — :func:`read_in_vm`. A reading that fails there (timeout, pod gone, non-zero exit)
is a :class:`Reading` with an ``error``, never an exception.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from merkat.control.types import Metrics
from merkat.service.patterns import RegexError, compile_regex
from merkat.service.templates import METRIC_FIELDS, Monitor

TAIL_BYTES = 65_536
INT_FIELDS = ("tasks_left",)


@dataclass(frozen=True)
class Reading:
    """One reading of a monitor: the values it gave, and what went wrong (None: nothing)."""

    values: dict[str, float]
    error: str | None = None
    timed_out: bool = False  # killed at its time limit


def read_in_vm(backend: Any, vm: str | None, monitor: Monitor,
               timeout: float = 5.0) -> Reading | None:
    """``monitor`` read inside ``vm`` when ``backend`` runs commands in its VMs (module doc);
    None when it does not (the monitor runs on this machine). A command monitor runs ``/bin/sh -c
    command`` there; a log monitor reads the VM's own output (the pod's log) or, with a
    ``path``, the last 64 KiB of that file in the VM."""
    from merkat.service.backends import Remote

    if not isinstance(backend, Remote):
        return None
    if vm is None:  # its VM has not started yet: nothing to read (and not on this machine)
        return Reading({})
    if monitor.kind == "log" and not monitor.path:
        text, error = backend.log_text(vm)
        return Reading(match_log(text, monitor.regex or ""), error)
    if monitor.kind == "log":
        command = f"tail -c {TAIL_BYTES} {shlex.quote(monitor.path or '')}"
    elif monitor.kind == "command":
        command = monitor.command or ""
    else:
        return None
    r = backend.exec_in(vm, command, timeout)
    out = r.stdout if r.error is None else ""
    values = parse_output(out) if monitor.kind == "command" else match_log(out, monitor.regex or "")
    return Reading(values, r.problem())


def read_tail(path: Path, size: int = TAIL_BYTES, resolved: bool = False) -> str:
    """The last ``size`` bytes of the regular file ``path`` as text ("" when it is missing or
    not a regular file: opened non-blocking, so a FIFO or a device never blocks).

    ``resolved``: ``path`` is absolute and was resolved (``os.path.realpath``: no link in it)
    under a directory its owner may change, so it is opened one component at a time without
    following a link (:func:`open_resolved`): a directory she swapped for a link since (to
    ``/etc``) fails the read instead of making the server read ``/etc/shadow`` for her."""
    try:
        fd = open_resolved(str(path)) if resolved else os.open(
            path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        os.lseek(fd, max(0, st.st_size - size), os.SEEK_SET)
        return os.read(fd, size).decode(errors="replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def open_resolved(path: str) -> int:
    """A descriptor of the absolute, already resolved ``path`` (read-only, non-blocking),
    opened from ``/`` one component at a time, none followed if it is a link (``O_NOFOLLOW``;
    directories as ``O_PATH``, which needs no read permission): a component that became a
    link since ``path`` was resolved is ``ELOOP``/``ENOTDIR``, never the link's target.
    Raises ``OSError``."""
    parts = Path(path).parts
    if len(parts) < 2 or parts[0] != "/":
        raise OSError(f"not an absolute path to a file: {path!r}")
    flags = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open("/", flags)
    try:
        for part in parts[1:-1]:
            nfd = os.open(part, flags, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return os.open(parts[-1], os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=fd)
    finally:
        os.close(fd)


def match_log(text: str, regex: str) -> dict[str, float]:
    """The named groups of the last match of ``regex`` in ``text`` ({} if none), in RE2."""
    try:
        rx = compile_regex(regex)
    except RegexError:
        return {}
    last = None
    for m in rx.finditer(text):
        last = m
    if last is None:
        return {}
    return _numbers(last.groupdict())


@dataclass(frozen=True)
class Ran:
    """What a monitor's command gave (:func:`~merkat.service.probes.run_monitor_command`):
    the output (at most 64 KiB), the exit status (None when killed), and whether the time
    limit killed it."""

    stdout: str
    code: int | None
    timed_out: bool = False
    error: str | None = None


def parse_output(out: str) -> dict[str, float]:
    out = out.strip()
    if out.startswith("{"):
        try:
            data = json.loads(out)
        except ValueError:
            return {}
        return _numbers(data) if isinstance(data, dict) else {}
    pairs = dict(w.split("=", 1) for w in out.split() if "=" in w)
    return _numbers(pairs)


def _numbers(d: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in d.items():
        if k in METRIC_FIELDS and v is not None:
            try:
                x = float(v)
            except (TypeError, ValueError):
                continue
            if x == x and abs(x) != float("inf"):
                out[k] = x
    return out


@dataclass
class MetricsTracker:
    """The latest metrics of one platform, from its monitor's readings."""

    monitor: Monitor | None
    values: dict[str, float] = field(default_factory=dict)
    last_work: tuple[float, float] | None = None  # (time, work_done) of the last progress
    rate: float | None = None

    def update(self, values: dict[str, float], now: float) -> None:
        """Merge a reading taken at ``now``; the progress rate is measured between readings
        that show different work done."""
        self.values.update(values)
        work = values.get("work_done")
        if work is None:
            return
        if self.last_work is None:
            self.last_work = (now, work)
        elif work != self.last_work[1] and now > self.last_work[0]:
            self.rate = max(0.0, (work - self.last_work[1]) / (now - self.last_work[0]))
            self.last_work = (now, work)

    def metrics(self) -> Metrics:
        v = self.values
        ideal = self.monitor.ideal_rate if self.monitor else None
        kw: dict[str, Any] = {k: v[k] for k in ("performance", "reference", "work_total",
                                                "task_time_avg", "task_time_max") if k in v}
        if "tasks_left" in v:
            kw["tasks_left"] = int(v["tasks_left"])
        return Metrics(work_done=v.get("work_done", 0.0),
                       progress_rate=v.get("progress_rate", self.rate),
                       ideal_rate=v.get("ideal_rate", ideal), **kw)
