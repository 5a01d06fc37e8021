"""The live service's period loop, which survives its own errors (docs/service.md, "The
period loop").

:func:`run_loop` is :meth:`Manager.run <merkat.service.manager.Manager.run>`: admission every
``admission`` seconds, a period every ``period`` seconds, until told to stop. Its contract:

- **It never dies silently.** A period (or an admission) that raises — a database that cannot
  be read or written, a bug — is logged on stderr and kept in :class:`LoopHealth` (what
  ``/health`` answers, HTTP 503 with the reason, and ``/metrics`` exports:
  :class:`LoopCollector`); the handler writes nothing to the database (it may be what
  failed). The same work is retried with an exponential back-off (1 s, 2 s, 4 s, ... at most
  one period and :data:`BACKOFF_MAX`), never in a tight loop; the first attempt that works
  ends the failure, with one ``loop`` event saying how long it lasted.
- **No replayed periods.** When the loop falls behind (the machine was suspended, a period
  took longer than the period, the database was down for a while), the missed boundaries are
  dropped: the next period runs once, at once, and covers the elapsed time; the next one is a
  period after it (a ``loop`` event and the ``merkat_period_loop_stalls`` counter). That
  period is charged once, at its bids for one period: time the market could not clear is not
  billed.
- **A period is never run twice under one index.** The index continues after the last period
  the bank or the price table saw (:func:`first_period`), at start-up and after a failure, so
  a period whose charge was committed but whose record was not (a crash between the two) is
  never charged again under the same idempotency keys: the restarted period is the next one.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from merkat.service.context import ManagerState

if TYPE_CHECKING:
    from merkat.service.db import Store

BACKOFF_START = 1.0
"""Seconds before the first retry of a failed period (doubled per consecutive failure)."""

BACKOFF_MAX = 60.0
"""The longest wait between two attempts (and never longer than one period)."""

BUSY_MIN = 30.0
"""Work under way (a period, an admission) longer than this and two periods is reported by
``/health`` (a database locked by another process makes the bank wait up to a minute)."""

NOTE_EVERY = 60.0
"""At most one ``loop`` event (and log line) about stalls per this many seconds: a server
starved for CPU falls behind every period, and says so once a minute, with the count."""


def _log(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", file=sys.stderr, flush=True)


@dataclass
class LoopHealth:
    """The period loop's state as ``/health`` and ``/metrics`` show it (in memory only: it
    must be readable while the database is not)."""

    ok: bool = True
    reason: str | None = None  # the last failure's, while failing
    since: float | None = None  # when the current run of failures began
    failures: int = 0  # consecutive failed attempts (0: healthy)
    failures_total: int = 0
    recoveries_total: int = 0
    stalls_total: int = 0
    periods_skipped_total: int = 0  # boundaries dropped after stalls
    retry_at: float | None = None  # when the next attempt runs (while failing)
    last_period_at: float | None = None  # when the last period completed (clock)
    busy_since: float | None = None  # when the work under way (admission, period) began
    stall_noted_at: float | None = None  # when the last stall event was written
    stalls_unnoted: int = 0  # stalls since then
    skipped_unnoted: int = 0
    thread: threading.Thread | None = field(default=None, repr=False)

    def failed(self, exc: BaseException, now: float, period: float) -> float:
        """Record a failed attempt; returns the back-off (seconds) before the next one."""
        reason = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        if self.failures == 0:
            self.since = now
        self.failures += 1
        self.failures_total += 1
        self.ok = False
        self.reason = reason
        delay: float = min(BACKOFF_START * 2.0 ** (self.failures - 1),
                           max(BACKOFF_START, period), BACKOFF_MAX)
        self.retry_at = now + delay
        return delay

    def recovered(self) -> tuple[int, float | None, str | None]:
        """Clear the failure; returns what it was (failures, since, reason)."""
        was = (self.failures, self.since, self.reason)
        self.ok, self.failures, self.since, self.reason, self.retry_at = True, 0, None, None, None
        self.recoveries_total += 1
        return was

    def problem(self, now: float, period: float) -> str | None:
        """Why the loop is not healthy now, or None: it is failing; its work under way (a
        period, an admission: waiting for a locked database...) has taken more than two
        periods and 30 s; its thread is gone; or no period completed for three periods and a
        minute while its thread runs."""
        if not self.ok:
            return self.reason or "failing"
        busy = self.busy_since
        if busy is not None and now - busy > max(2 * period, BUSY_MIN):
            return f"a period (or admission) has been running for {now - busy:.0f} s"
        t = self.thread
        if t is None:  # no loop thread (a manager driven by hand): nothing to judge
            return None
        if not t.is_alive():
            return "the period loop is not running"
        if self.last_period_at is not None and now - self.last_period_at > 3 * period + 60:
            return f"no period for {now - self.last_period_at:.0f} s"
        return None

    def as_dict(self, now: float, period: float) -> dict[str, Any]:
        problem = self.problem(now, period)
        return {"ok": problem is None, "reason": problem, "since": self.since,
                "failures": self.failures, "failures_total": self.failures_total,
                "retry_in": None if self.retry_at is None else max(0.0, self.retry_at - now),
                "stalls_total": self.stalls_total, "last_period": self.last_period_at}


def first_period(store: Store) -> int:
    """The index the next period must take: one after the last period the price table or the
    bank saw (a period's renewals and charges carry its index; a crash after them and before
    the period's price record must not make the next period reuse their idempotency keys)."""
    from sqlalchemy import func, select

    from merkat.bank import schema

    with store.engine.connect() as conn:
        v = conn.execute(select(func.max(schema.transfers.c.period))).scalar()
    return max(store.last_period(), -1 if v is None else int(v)) + 1


def next_boundary(scheduled: float, started: float, ended: float, period: float) -> float:
    """When the period after one ``scheduled`` at ``scheduled`` (run from ``started`` to
    ``ended``) runs: a period after ``scheduled`` when that is still ahead; otherwise
    (boundaries were missed) a period after ``started``, or at once (``ended``) when that
    too has passed: a missed boundary is never run."""
    nxt = scheduled + period
    if nxt > ended:
        return nxt
    return max(started + period, ended)


class Looping(ManagerState, Protocol):
    """What the loop needs of the manager besides its state (:class:`~merkat.service.context.
    ManagerState`): its health, when the next period is due, and its three steps."""

    health: LoopHealth
    next_period: float

    def admit(self) -> list[str]: ...

    def tick(self) -> dict[str, Any]: ...

    def start_queued(self) -> list[str]: ...


def run_loop(m: Looping, stop: threading.Event,
             on_period: Callable[[dict[str, Any]], None] | None = None) -> None:
    """The wall-clock loop of ``m`` (module doc) until ``stop`` is set."""
    health = m.health
    P = m.config.period
    m.next_period = m.clock()
    while not stop.is_set():
        health.busy_since = m.clock()
        try:
            if health.failures:  # a failed period may have charged: never reuse its index
                _repair(m)
            m.admit()
            started = m.clock()
            if started >= m.next_period:
                scheduled = m.next_period
                rec = m.tick()
                ended = m.clock()
                m.next_period = next_boundary(scheduled, started, ended, P)
                health.last_period_at = ended
                if scheduled + P <= ended:  # at least one boundary was missed
                    _stalled(m, health, scheduled, ended, P)
                if on_period:
                    on_period(rec)
            else:
                m.start_queued()
        except Exception as exc:  # whatever failed, the loop goes on
            health.busy_since = None
            delay = health.failed(exc, m.clock(), P)
            # stderr only: the database may be what failed
            _log(f"period loop: attempt failed ({health.reason}); retry in {delay:g} s "
                 f"(failure {health.failures} in a row)")
            stop.wait(delay)
            continue
        health.busy_since = None
        if health.failures:
            n, since, reason = health.recovered()
            down = m.clock() - since if since is not None else 0.0
            msg = (f"period loop recovered after {n} failed attempt(s) over {down:.0f} s "
                   f"(last: {reason})")
            _log(msg)
            _safe_event(m, "loop", msg)
        wait = min(m.config.admission, max(0.0, m.next_period - m.clock()))
        stop.wait(wait)


def _repair(m: Looping) -> None:
    """Before retrying after a failure: the records and the backend agree again
    (:func:`~merkat.service.failures.reconcile`), the index after what the bank saw."""
    from merkat.service.failures import reconcile

    with m.lock:
        for line in reconcile(m):
            _log(f"period loop: after the failure, {line}")
        m.platform.index = max(m.platform.index, first_period(m.store))


def _stalled(m: Looping, health: LoopHealth, scheduled: float, ended: float,
             P: float) -> None:
    skipped = int((ended - scheduled) // P)
    health.stalls_total += 1
    health.periods_skipped_total += skipped
    health.stalls_unnoted += 1
    health.skipped_unnoted += skipped
    last = health.stall_noted_at
    if last is not None and ended - last < NOTE_EVERY:
        return  # (counted; said at the next note)
    n, k = health.stalls_unnoted, health.skipped_unnoted
    health.stall_noted_at, health.stalls_unnoted, health.skipped_unnoted = ended, 0, 0
    msg = (f"period loop fell behind by {ended - scheduled:.1f} s: one period covered it "
           f"({skipped} missed period(s) not replayed)")
    if n > 1:
        msg += f"; {n} such stalls since the last note ({k} periods not replayed)"
    _log(msg)
    _safe_event(m, "loop", msg)


def _safe_event(m: Looping, kind: str, message: str) -> None:
    try:
        m.store.add_event(kind, message)
    except Exception as exc:  # a note, not worth failing the loop for
        _log(f"cannot record event ({type(exc).__name__}: {exc})")


class LoopCollector:
    """The loop's health for Prometheus (``/metrics``): ``merkat_period_loop_up`` (1 healthy,
    0 failing), ``merkat_period_loop_consecutive_failures``,
    ``merkat_period_loop_failures_total``, ``merkat_period_loop_recoveries_total``,
    ``merkat_period_loop_stalls_total``, ``merkat_period_loop_skipped_periods_total``."""

    def __init__(self, manager: Looping) -> None:
        self.manager = manager

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        m = self.manager
        h = m.health
        up = h.problem(m.clock(), m.config.period) is None
        yield GaugeMetricFamily("merkat_period_loop_up",
                                "1 while the period loop runs its periods, 0 while it fails "
                                "(see /health for the reason).", value=1.0 if up else 0.0)
        yield GaugeMetricFamily("merkat_period_loop_consecutive_failures",
                                "Failed attempts in a row of the period loop (0: healthy).",
                                value=float(h.failures))
        for name, doc, value in (
                ("merkat_period_loop_failures", "Failed attempts of the period loop.",
                 h.failures_total),
                ("merkat_period_loop_recoveries", "Times the period loop recovered.",
                 h.recoveries_total),
                ("merkat_period_loop_stalls", "Times the period loop fell behind.",
                 h.stalls_total),
                ("merkat_period_loop_skipped_periods",
                 "Period boundaries dropped after the loop fell behind (not replayed).",
                 h.periods_skipped_total)):
            yield CounterMetricFamily(name, doc, value=float(value))
