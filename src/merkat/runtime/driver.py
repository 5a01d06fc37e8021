"""The driver: the one loop around the period, and the only caller of its decision.

A :class:`Driver` is configured with a :class:`~merkat.core.period.Platform` (the
decision), a backend (the world: :class:`~merkat.backends.sim.SimBackend`, Kubernetes, local
processes), an :class:`~merkat.runtime.economy.Economy` on a ledger (the money), a clock
(:mod:`~merkat.runtime.clock`: virtual or wall) and arrivals (:mod:`~merkat.runtime.arrivals`).
Trace runs (:mod:`merkat.worlds.merkat.trace`), the scenario experiments
(:mod:`merkat.worlds.merkat.scenarios`) and the live service are configurations of it.

One period at time ``t`` (:meth:`Driver.step`):

1. admit the arrivals due (events fire first); each application is submitted to the platform,
   given to the backend (``admit``) and its account opened and funded by the economy (an
   admission that fails there is withdrawn from the platform: ``Platform.withdraw``);
2. ``hooks.before_period``; the economy renews the active applications' budgets;
3. read the balances and, per active application, what the backend reports
   (:class:`~merkat.core.period.Observed`); ``platform.decide``;
4. the economy charges the bills (charging by measured use: it first settles last period's
   deposits with the CPU the backend measured, ``backend.cpu_used(app)``, read before the
   decision; :mod:`merkat.runtime.metering`); ``platform.withhold`` takes unpaid
   applications' VMs out;
5. ``backend.apply(plan)`` → a report; ``platform.commit`` writes the decision into the
   platform's records with the VM states the report gives (the decision changed none);
6. the Virtual Bank redistributes (closed economy); with ``economy.return_budgets``, the
   applications that ended in this period give their money back to their owners (the end
   rule, :meth:`Driver.close_ended`); ``hooks.after_period``.

The end rule is one path in every world: an application that ends (in a period, by
:meth:`Driver.stop`, at an admission point, or named by :meth:`Driver.end`) is queued
(:attr:`Driver.closing`) and :meth:`Driver.close_ended` runs its rule, one transaction per
application: an open deposit of charging by measured use is settled first
(:meth:`Economy.settle_ended <merkat.runtime.economy.Economy.settle_ended>`), then
:meth:`Economy.close <merkat.runtime.economy.Economy.close>` moves what its account and hold
account hold to its owner **together with the world's own record of the end**
(``hooks.ending``: the live service writes the platform's ended row in the store, in the same
database transaction; the simulator writes nothing). A transaction that fails leaves the
application queued, so that the next period tries again: fully applied or not at all, never
twice (``hooks.closed`` runs after each one that was applied).

Between periods the applications manager admits (Merkat §4.2.2): with an ``admission``
interval shorter than the period, at each admission point (a multiple of the interval) after
an arrival the driver admits it, lets the platform start what can start at the last prices,
placed beside the running VMs (:meth:`Platform.admit <merkat.core.period.Platform.admit>`;
:mod:`merkat.core.admission`), advances a simulated world to that point, charges the
prorated bills and applies the plan (:meth:`Driver.admit_between`,
:meth:`Driver.admission_point`, which the live service calls on its own clock). Without it (``admission=None``) arrivals wait for the next
period boundary. The world runs: a simulated backend advances its applications to the next
boundary (``advance(t0, t1)``, when it has one; a VM started between periods is ready
``boot_s`` after its start), the clock waits until then. With ``skip_idle`` (virtual clocks)
the driver jumps over idle time to the period of the next arrival (and runs no period while
nothing is active). Hooks (:class:`Hooks`) see every step: progress, samplers, and ``idle`` — the cut
points of ``--workers`` (:mod:`merkat.worlds.merkat.parallel`), which may stop the run.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from merkat.control.base import Controller
from merkat.core.backend import ApplyReport, Backend, Plan
from merkat.core.model import App, AppSpec, Charged, PeriodRecord
from merkat.core.period import Platform
from merkat.runtime.arrivals import Arrival, Arrivals, ListArrivals
from merkat.runtime.clock import Clock, VirtualClock
from merkat.runtime.economy import Economy
from merkat.runtime.loop import loop_periods
from merkat.runtime.metering import Metered
from merkat.runtime.observe import observe


@dataclass(frozen=True)
class Ending:
    """The world's record of an application's end (:meth:`Hooks.ending`): ``write(conn)``
    runs inside the transaction that returns its money (the ledger's ``also``), ``reason``
    is that transaction's history line (None: ``budget returned``)."""

    write: Callable[[Any], None] | None = None
    reason: str | None = None


class Hooks:
    """Callbacks of a run (all optional; override what you need)."""

    def ending(self, driver: Driver, app_id: str) -> Ending:
        """The world's record of application ``app_id``'s end, written in the end rule's
        transaction (:meth:`Driver.close_ended`). Default: nothing."""
        return Ending()

    def closed(self, driver: Driver, app_id: str, returned: int) -> None:
        """After the end rule of ``app_id`` was applied (``returned`` micro-credits home)."""

    def admitted(self, driver: Driver, arrival: Arrival, app: App | None) -> None:
        """After an arrival is admitted (``app`` is None for an event)."""

    def before_period(self, driver: Driver, t: float) -> None:
        """Before the period at ``t`` (after the admissions)."""

    def after_period(self, driver: Driver, t: float, record: PeriodRecord) -> None:
        """After the period at ``t`` was applied and recorded."""

    def idle(self, driver: Driver, t: float) -> bool:
        """No application is active at ``t``: return True to stop the run here."""
        return False

    def ended(self, driver: Driver, apps: list[App]) -> None:
        """``apps`` ended in the period or admission point just applied (their last plan
        applied, their money settled): nothing the driver does later reads or changes them,
        so a run may summarise them and let them go (:meth:`Driver.forget`)."""


def admit_sim(backend: Any, arrival: Arrival) -> None:
    """How an application enters a simulated backend: its model is added under its id."""
    assert arrival.spec is not None
    backend.add_app(arrival.spec.id, arrival.model)


class _Now:
    """The arrivals of :meth:`Driver.submit`: due at once."""

    def __init__(self, items: list[Arrival]) -> None:
        self.items = items

    def next_time(self) -> float | None:
        return None

    def due(self, t: float) -> list[Arrival]:
        out = list(self.items)
        self.items.clear()
        return out


@dataclass
class Driver:
    """The loop; see the module docstring. ``admit(backend, arrival)`` gives an admitted
    application to the backend (default: :func:`admit_sim`)."""

    platform: Platform
    backend: Backend
    economy: Economy
    arrivals: Arrivals = field(default_factory=ListArrivals)
    clock: Clock = field(default_factory=VirtualClock)
    hooks: Hooks = field(default_factory=Hooks)
    admit: Callable[[Any, Arrival], None] = admit_sim
    skip_idle: bool = True
    admission: float | None = None  # seconds between admission points (None: periods only)
    arrivals_now: list[Arrival] = field(default_factory=list, repr=False)
    report: ApplyReport | None = field(default=None, repr=False)  # the last plan's
    # the ended applications whose end rule has not been applied yet: id -> (account, period)
    closing: dict[str, tuple[str, int]] = field(default_factory=dict, repr=False)

    @property
    def period(self) -> float:
        return self.platform.period

    def admit_due(self, t: float) -> None:
        """Admit every arrival due at ``t``."""
        platform, economy, hooks = self.platform, self.economy, self.hooks
        for arrival in self.arrivals.due(t):
            if arrival.event is not None:
                arrival.event(self)
                hooks.admitted(self, arrival, None)
                continue
            assert arrival.spec is not None
            app = platform.submit(arrival.spec, arrival.controller,  # checks the spec first
                                  account=arrival.account)
            try:
                self.admit(self.backend, arrival)
                economy.open(app, platform.index)  # (live: the owner may not have the budget)
            except Exception:
                platform.withdraw(app.spec.id)  # no half-admitted application stays
                raise
            hooks.admitted(self, arrival, app)

    def submit(self, spec: AppSpec, model: Any = None, controller: Controller | None = None,
               account: str | None = None) -> App:
        """Admit one application now (its account, ``account`` or ``app:ID``, opened and
        funded); it takes part in the next period."""
        self.arrivals_now.append(Arrival(spec.submit_time, spec, model, controller,
                                         account=account))
        arrivals, self.arrivals = self.arrivals, _Now(self.arrivals_now)
        try:
            self.admit_due(math.inf)
        finally:
            self.arrivals = arrivals
            self.arrivals_now.clear()
        return self.platform.apps[spec.id]

    def step(self, t: float) -> PeriodRecord:
        """One period at ``t``: steps 2-6 of the module docstring (admit first with
        :meth:`admit_due`)."""
        platform, backend, economy = self.platform, self.backend, self.economy
        self.hooks.before_period(self, t)
        active, names = platform.roster()  # (kept between periods: not to be changed)
        minted = economy.renew(platform.index, names)
        balances = economy.ledger.balances(names) if active else {}
        observed = observe(backend, active)
        measured = None
        if economy.metered:  # charging by measured use: the CPU used since the last period
            meter = backend if isinstance(backend, Metered) else None
            measured = {a.spec.id: meter.cpu_used(a.spec.id) if meter else None for a in active}
        decision = platform.decide(t, balances, observed)
        charged = economy.charge(decision, platform.accounts) if measured is None \
            else economy.charge(decision, platform.accounts, measured)
        if charged.unpaid:
            decision = platform.withhold(decision, charged.unpaid)
        report = self.report = backend.apply(decision.plan)
        given = economy.redistribute(platform.index)
        if minted or given:
            charged = Charged(charged.paid, charged.unpaid, charged.total, minted, given)
        record = platform.commit(decision, report, charged)
        # (only an end leaves ``active`` during a period, and nothing joins it)
        ended = [a for a in active if not a.active] if len(platform.active) < len(active) else []
        if economy.return_budgets:  # the end rule: budgets come home
            for a in ended:
                self.end(a.spec.id, a.account, record.index)
            if self.closing:
                self.close_ended()  # (with those a failed transaction left: raised here)
        self.hooks.after_period(self, t, record)
        if ended:
            self.hooks.ended(self, ended)
        return record

    def end(self, app_id: str, account: str, period: int) -> None:
        """Queue the end rule of application ``app_id`` (its ``account``; ``period``: the
        period it ended in, the transaction's), with ``economy.return_budgets``; the
        platform need not hold it (the live service's platform that could not be admitted
        again after a restart). :meth:`close_ended` applies it."""
        if self.economy.return_budgets:
            self.closing.setdefault(app_id, (account, period))

    def close_ended(self) -> dict[str, int]:
        """Apply the end rule of every queued application (module doc), each in its own
        transaction; returns ``{app id: micro-credits returned}``. One that fails stays
        queued (the next call tries it again) and its error is raised once the others were
        tried."""
        economy, platform = self.economy, self.platform
        meter = self.backend if economy.metered and isinstance(self.backend, Metered) else None
        out: dict[str, int] = {}
        error: Exception | None = None
        for app_id, (account, period) in list(self.closing.items()):
            try:
                if economy.metered:  # an open deposit: pay what was used first
                    paid = economy.settle_ended(
                        {app_id: meter.cpu_used(app_id) if meter else None}, period)
                    app = platform.apps.get(app_id)
                    if app is not None and paid.get(app_id):
                        app.spent += paid[app_id]
                ending = self.hooks.ending(self, app_id)
                returned = economy.close([account], period, also=ending.write,
                                         reason=ending.reason)
            except Exception as exc:  # (a database that failed: retried by the next call)
                error = error or exc
                continue
            del self.closing[app_id]
            out[app_id] = sum(returned.values())
            self.hooks.closed(self, app_id, out[app_id])
        if error is not None:
            raise error
        return out

    def _close_soon(self, apps: list[App]) -> None:
        """Queue the end rule of those of ``apps`` that ended and apply it now; a failed
        transaction stays queued for the next period, which raises it if it fails again."""
        for a in apps:
            if not a.active:
                self.end(a.spec.id, a.account, self.platform.index)
        if self.closing:
            with contextlib.suppress(Exception):
                self.close_ended()

    def stop(self, app_id: str, reason: str, failed: bool = False,
             also: tuple[str, ...] = ()) -> ApplyReport:
        """End application ``app_id`` now, at its owner's request (``failed``: its world
        failed it): the platform's end rule (:meth:`Platform.stop
        <merkat.core.period.Platform.stop>`, the lifecycle table), its VMs (and the VMs
        ``also`` names) destroyed at once (a destroy that fails is re-issued by the next
        period), its money home with ``economy.return_budgets`` (the end rule; a
        transaction that fails is tried again by the next period). Returns the backend's
        report."""
        now = self.clock.now()
        app = self.platform.apps[app_id]
        ids = self.platform.stop(app_id, now, reason, failed)
        destroy = ids + tuple(v for v in also if v not in ids)
        report = ApplyReport(now)  # (nothing to destroy: the backend is not called)
        if destroy:
            report = self.report = self.backend.apply(Plan(now, self.period, destroy=destroy))
            self.platform.reissue(report)
        self._close_soon([app])
        self._ended([app])
        return report

    @property
    def admits_between(self) -> bool:
        """Whether this driver admits applications between periods."""
        A = self.admission
        return A is not None and 0 < A < self.period and self.platform.admits_between

    def admit_between(self, t0: float, t1: float) -> float:
        """The admission points of the period ``[t0, t1)``: at the first multiple of the
        admission interval at or after each arrival (before ``t1``), admit what is due and
        start what can start (:meth:`admission_point`). A simulated world (``advance``) is
        first advanced to an admission point that starts something (the hosts' shares change
        there). Returns the time the world was advanced to (``t0`` when nothing started)."""
        A = self.admission
        assert A is not None
        arrivals = self.arrivals
        advance = getattr(self.backend, "advance", None)
        done = t0

        def catch_up(a: float) -> None:
            nonlocal done
            if advance is not None and a > done:
                advance(done, a)
                done = a

        while True:
            nxt = arrivals.next_time()
            if nxt is None or nxt >= t1:
                return done
            a = max(math.ceil(nxt / A) * A, t0, nxt)  # (never before it, whatever the rounding)
            if a >= t1:
                return done
            self.clock.wait_until(a)
            self.admit_due(a)
            self.admission_point(a, t1, before_apply=catch_up)

    def admission_point(self, a: float, t1: float,
                        before_apply: Callable[[float], None] | None = None) -> ApplyReport | None:
        """One admission point at ``a`` (``t1``: the next period boundary): the queued
        applications' start condition at the last prices; those that start are placed,
        charged pro rata and applied (:meth:`Platform.admit
        <merkat.core.period.Platform.admit>`). ``before_apply(a)`` runs just before the
        backend applies the plan. Returns the backend's report, or None when nothing
        started. The live service calls it every admission interval."""
        platform, backend, economy = self.platform, self.backend, self.economy
        queued = platform.queued()
        if not queued:
            return None
        balances = economy.ledger.balances([app.account for app in queued])
        observed = observe(backend, queued)  # (none is running: no idle VMs)
        decision = platform.admit(a, t1, balances, observed)
        if not decision.plan.create:  # nothing starts: what the queue decided is committed
            platform.settle(decision, ApplyReport(a), Charged({}, frozenset(), 0))
            self._close_soon(queued)
            self._ended(queued)
            return None
        charged = economy.charge(decision, platform.accounts)
        if charged.unpaid:
            decision = platform.withhold(decision, charged.unpaid)
        if before_apply is not None:
            before_apply(a)
        report = self.report = backend.apply(decision.plan)
        platform.settle(decision, report, charged)
        self._close_soon(queued)  # (a controller that raised: merkat.core.isolation)
        self._ended(queued)
        return report

    def _ended(self, apps: list[App]) -> None:
        """``hooks.ended`` with those of ``apps`` that ended."""
        ended = [a for a in apps if not a.active]
        if ended:
            self.hooks.ended(self, ended)

    def forget(self, apps: list[App]) -> None:
        """Let ended ``apps`` go: the platform, the backend (when it has ``forget``) and the
        economy drop what they keep of them (their records, models, controllers, renewals;
        the bank keeps their accounts). A long run calls it from ``hooks.ended`` once it has
        summarised them, so that its memory follows the active applications, not every
        application it ever ran (docs/benchmarks.md, "Memory at trace scale")."""
        ids = [a.spec.id for a in apps]
        self.platform.forget(ids)
        drop = getattr(self.backend, "forget", None)
        if drop is not None:
            drop(ids)
        self.economy.forget([a.account for a in apps])

    def run(self, until: float = math.inf, start: float | None = None) -> float:
        """Run periods from ``start`` (default: the period boundary at or before the first
        arrival) while ``t < until`` and an arrival is pending or an application is active;
        return the time it stopped at. The loop is :func:`merkat.runtime.loop.loop_periods`
        (this driver is its :class:`~merkat.runtime.loop.Periodic`)."""
        return loop_periods(self, until, start)

    # --- the loop's view of this driver (merkat.runtime.loop.Periodic) --------------------

    def busy(self) -> bool:
        return bool(self.platform.active)

    def idle(self, t: float) -> bool:
        return self.hooks.idle(self, t)

    def skip(self, t: float, arrival: float) -> float:
        """The period the arrival at ``arrival`` is admitted in: between periods, or at the
        next boundary."""
        P = self.period
        return max(t, (math.floor if self.admits_between else math.ceil)(arrival / P) * P)

    def period_at(self, t: float) -> bool:
        self.step(t)
        return True

    def after(self, t0: float, t1: float) -> None:
        """Admissions between periods (:meth:`admit_between`), then a simulated world
        advances to ``t1``."""
        done = self.admit_between(t0, t1) if self.admits_between else t0
        advance = getattr(self.backend, "advance", None)
        if advance is not None:
            advance(done, t1)
