"""The applications manager (Merkat §4.1.1, §4.2): queue, admission, monitors, shutdown —
around the market scheduler's period, on the wall clock.

:class:`Manager` is the live service's configuration of the runtime driver
(:class:`~merkat.runtime.driver.Driver`: a :class:`~merkat.core.period.Platform`, the live
backend, the config's :class:`~merkat.runtime.economy.Economy` on the store's ledger, the wall
clock), built as the simulator builds its own (docs/service.md). Its life:

- :meth:`submit` (the API) validates a template against the owner's balance and puts the
  platform in the queue (state ``queued``);
- :meth:`admit`, every admission interval (10 s), hands queued platforms to the driver
  (:func:`merkat.service.admit.admit_row`: ``Driver.submit``, its account opened and funded
  from the owner's by the economy, its controller, its launcher given to the backend). The
  controller's start condition then decides when it starts: at once between periods
  (:meth:`start_queued`: ``Driver.admission_point``), else each period (``waiting`` until
  then: "put back in the queue");
- :meth:`tick`, every period (40 s), reaps and restarts failed processes (health check),
  reads the monitors, runs the period (:meth:`_step`: ``Driver.step``), refunds the VMs
  that did not start (:mod:`merkat.service.starts`) and records prices, states and events in
  the store;
- :meth:`stop` ends a platform at the user's request (``Driver.stop``: the platform's end
  rule, the lifecycle table's STOP).

Every public method takes the manager's lock: the API thread and the loop thread never see a
half-done period.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from merkat.bank.errors import BankError
from merkat.bank.ledger import AccountKind
from merkat.bank.money import format_amount
from merkat.core.backend import ApplyReport
from merkat.core.period import (
    ENDED,
    AppStatus,
    PeriodRecord,
    Platform,
)
from merkat.market import NO_HOST, Hosts
from merkat.service import quotas, tenancy, usercmds
from merkat.service.admit import admit_row, make_controller, register_launcher
from merkat.service.backends import Elastic, LiveBackend
from merkat.service.clusters import platform_metrics
from merkat.service.config import ServiceConfig
from merkat.service.context import Live
from merkat.service.context import NotFound as NotFound
from merkat.service.db import PlatformRow, Store
from merkat.service.logtail import LogCap, platform_logs
from merkat.service.starts import refund_failed_starts
from merkat.service.templates import Template, TemplateError
from merkat.service.tenants import Tenants

VM_EVENTS = {"create": "vm-start", "suspend": "vm-suspend", "resume": "vm-resume",
             "migrate": "vm-migrate", "destroy": "vm-shutdown",
             "restart": "vm-restart", "resize-retry": "resize-retry",
             "move": "vm-move", "notice": "vm-notice"}  # kubernetes
"""Backend operations that become events (kind by operation); ``limit`` (every VM, every
period) does not."""

class Manager:
    """The applications manager and the period loop of the live service (module doc)."""

    def __init__(self, config: ServiceConfig, store: Store, backend: LiveBackend,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.store = store
        self.backend = backend
        self.clock = clock
        self.lock = threading.RLock()
        nodes = backend.node_list()
        hosts = Hosts(tuple(n.name for n in nodes),  # the market sells the allocatable
                      _capacity([(getattr(n, "allocatable_cores", n.cores),
                                  getattr(n, "allocatable_memory", n.memory)) for n in nodes]))
        self.platform = Platform(hosts=hosts, period=config.period,
                                 reserve=dict(config.reserve), provider=config.provider)
        from merkat.service.loop import LoopHealth, first_period

        # the period counter continues after the last period the prices or the bank saw
        self.platform.index = first_period(store)
        self.health = LoopHealth()  # the period loop's, for /health and /metrics
        from merkat.service.probes import MonitorRunner

        self.monitors = MonitorRunner(backend, clock)  # monitors run outside the lock
        # The period, the admissions and the ends: the runtime driver on this wall clock (the
        # service's loop, :meth:`run`, owns the waiting and the queue), as the simulator's.
        from merkat.runtime.clock import FunctionClock
        from merkat.runtime.driver import Driver
        from merkat.service.money import StoreEnds, economy_for

        self.ends = StoreEnds(self)  # the end rule's store write (ended row + money home)
        self.driver = Driver(self.platform, backend, economy_for(config, store.ledger),
                             clock=FunctionClock(clock), hooks=self.ends,
                             admit=register_launcher, skip_idle=False,
                             admission=config.admission)
        self.next_period = clock()  # when the loop runs the next period
        self.live: dict[str, Live] = {}
        self.ended: dict[str, Live] = {}  # the ended platforms' (their last readings)
        self.started = clock()
        self._batch: list[tuple[str, str, str | None, str | None, float]] | None = None
        self.paid: dict[str, int] = {}  # micro-credits each platform had paid at the last tick
        # Called after each period with (platform, its record, the period's wall seconds).
        self.observers: list[Callable[[Platform, PeriodRecord, float], None]] = []
        self.observers.append(LogCap(Path(config.data_dir) / "logs", config.limits.log_bytes))
        store.event_chars = config.limits.event_chars
        self.vm_index: dict[str, int] = {}  # each VM's index in its platform (its launcher's)
        self.saved_vms: dict[str, tuple[Any, ...]] = {}  # the VMs last written to the store
        if backend.warning:
            store.add_event("warning", backend.warning)
        self.tenants = Tenants(config, store)  # each user's host identity and work area
        if self.tenants.warning:
            store.add_event("warning", self.tenants.warning)
        from merkat.service.recovery import recover

        recover(self, lambda row: admit_row(self, row, Template.model_validate(row.template),
                                            resumed=True))

    # --- the API's side ----------------------------------------------------------------------

    def submit(self, owner: str, template: Template) -> PlatformRow:
        """Queue ``template`` for ``owner``. Refused (TemplateError/StoreError, nothing
        changed) when the controller is unknown, the name is taken or the budget exceeds the
        owner's balance."""
        make_controller(template.controller.policy, dict(template.controller.params))
        self.tenants.check(template)
        with self.lock:
            tenancy.check_submit(self, owner, template)  # name, budget, quotas
            self.store.add_platform(template.name, owner, template.model_dump(mode="json"))
            self.store.add_event("submitted", f"platform {template.name} queued", template.name,
                                 owner)
            row = self.store.platform(template.name)
            assert row is not None
            return row

    def stop(self, name: str, reason: str = "stopped by the user") -> None:
        """Shut platform ``name`` down now: destroy its VMs, record the outcome."""
        with self.lock:
            row = self.store.platform(name)
            if row is None:
                raise NotFound(name)
            if row.state == "queued":
                self._end_row(name, row.owner, "stopped", reason)
                return
            app = self.platform.apps.get(name)
            if app is None or not app.active:
                return
            # the platform's end rule (the lifecycle table's STOP), its VMs destroyed now
            self._report_events(self.driver.stop(name, reason))
            # stored now, so the caller reads the new state (if the store fails, the next
            # period writes it)
            with contextlib.suppress(Exception):
                self._sync(self.clock())

    def boost(self, name: str, amount: int, key: str | None = None) -> dict[str, Any]:
        """Tycoon §3's boosting: move ``amount`` micro-credits from the owner's account to the
        admitted platform ``name``'s account (waiting, running or suspended; a queued one has
        no account yet). Its controller spends the balance
        over the periods left to its deadline (``spend_limit``), so its bids rise from the
        next period on. Raises :class:`NotFound`, ``ValueError`` (the platform has ended) or
        a bank error (not enough money); nothing moves then."""
        with self.lock:
            row = self.store.platform(name)
            if row is None:
                raise NotFound(name)
            app = self.platform.apps.get(name)
            if row.state == "queued" and app is None:  # (said "only a queued ... can be")
                raise ValueError(f"platform {name!r} is queued: it has no account until it is "
                                 f"admitted (within {self.config.admission:g} s); boost it "
                                 "then")
            if app is None or not app.active:
                raise ValueError(f"platform {name!r} is {row.state}: only a waiting, running "
                                 "or suspended platform can be boosted")
            ledger = self.store.ledger
            before = ledger.balance(app.account)
            t = ledger.transfer(row.owner, app.account, amount, f"boost of {name}",
                                self.platform.index, idempotency_key=key)
            after = ledger.balance(app.account)
            if after != before:  # not a replay of an earlier boost with the same key
                self._event("boost", f"platform {name} boosted by {format_amount(amount)}",
                            name)
            return {"name": name, "id": t.id, "amount": format_amount(t.amount),
                    "balance": format_amount(after)}

    def push_metrics(self, name: str, values: dict[str, float]) -> None:
        with self.lock:
            live = self.live.get(name)
            if live is not None:
                live.tracker.update(values, self.clock())

    def vms(self, name: str) -> list[dict[str, Any]]:
        """The VMs of platform ``name`` as the API shows them."""
        with self.lock:
            app = self.platform.apps.get(name)
            if app is None:
                return []
            out: list[dict[str, Any]] = []
            for vm in app.records():
                d: dict[str, Any] = self.backend.describe(vm.id) or {}
                process = d.get("process")
                out.append({  # a VM whose process has ended never shows as running
                    "id": vm.id, "state": process if process in ("dead", "exited", "failed")
                    else vm.state.value,
                    "node": d.get("node") or (self.platform.hosts.ids[vm.host]
                                              if vm.host != NO_HOST else None),
                    "bid": {r: vm.bid.get(r, 0.0) for r in ("cpu", "memory")},
                    "allocation": {r: vm.alloc.get(r, 0.0) for r in ("cpu", "memory")},
                    "cgroup": d.get("cgroup"), "process": d.get("process"),
                    "pid": d.get("pid"), "adopted": d.get("adopted", False),
                    "restarts": d.get("restarts", 0),
                    "limits": d.get("limits"),
                    **{k: d[k] for k in ("pod", "requested", "applied", "resize", "preempt_at")
                       if k in d},
                })
            return out

    def slo(self, name: str) -> dict[str, Any]:
        """Progress against the SLO as the dashboard shows it: the deadline (absolute, s),
        the work done and total from the monitor, ``progress`` (work done / total, None when
        the monitor gives no total) and ``on_track`` (the measured rate finishes the work
        before the deadline; None without a deadline or a rate)."""
        with self.lock:
            app = self.platform.apps.get(name)
            live = self.live.get(name)
            m = platform_metrics(live) if live else None
            deadline = app.spec.deadline if app else None
            out: dict[str, Any] = {"policy": app.spec.policy if app else None,
                                   "deadline": deadline, "work_done": None,
                                   "work_total": None, "progress": None, "on_track": None}
            if m is not None and m.work_total:
                out.update(work_done=m.work_done, work_total=m.work_total,
                           progress=min(1.0, m.work_done / m.work_total))
                left, rate = m.work_left, m.progress_rate
                if deadline is not None and left is not None and rate:
                    out["on_track"] = self.clock() + left / rate <= deadline
            elif app is not None and app.status is AppStatus.FINISHED:
                out["progress"] = 1.0
            return out

    def spent(self, name: str) -> float:
        """Credits platform ``name`` has paid: counted by the loop while it is in memory,
        else from the books (one that ended before this server started paid what it paid,
        not 0: the dashboard's column said 0 for every ended platform after a restart)."""
        app = self.platform.apps.get(name)
        if app is not None:
            return app.spent / 1e6
        row = self.store.platform(name)
        if row is None or (not row.account and row.started is None):
            return 0.0  # never admitted: no account
        from merkat.service.recovery import paid_before

        return paid_before(self.store.ledger, row.account or f"app:{name}",
                           self.config.provider) / 1e6

    def logs(self, name: str, tail: int = 100) -> str:
        """The last ``tail`` lines of each VM's output, under a ``==> file <==`` header."""
        return platform_logs(Path(self.config.data_dir) / "logs" / name, tail,
                             self.config.limits.log_read_bytes)  # bounded memory

    # --- the loop's side ----------------------------------------------------------------------

    def admit(self) -> list[str]:
        """Move queued platforms into the platform loop (module doc); returns their names."""
        admitted = []
        with self.lock:
            for row in self.store.platforms(states=("queued",)):
                try:
                    t = Template.model_validate(row.template)
                    tenancy.check_admission(self, row, t)
                    admit_row(self, row, t)
                except (TemplateError, ValueError, BankError) as exc:
                    tenancy.forget(self, row.name)  # no half-admitted platform stays
                    self._end_row(row.name, row.owner, "failed", f"cannot admit: {exc}")
                    continue
                admitted.append(row.name)
        return admitted

    def tick(self) -> dict[str, Any]:
        """One period of the live platform; returns the period's record as a dict. Its events
        are written in one transaction at the end. The monitors are read first, outside the
        lock (:mod:`merkat.service.probes`)."""
        from merkat.service.probes import probe_monitors

        probe_monitors(self)
        with self.lock:
            self._batch = []
            try:
                return self._tick()
            finally:
                batch, self._batch = self._batch, None
                self.store.add_events(batch)

    def _tick(self) -> dict[str, Any]:
        with self.lock:
            now = self.clock()
            if isinstance(self.backend, Elastic):  # nodes come and go (kubernetes backend)
                self.platform.hosts = self.backend.hosts()
            for r in self.backend.poll():
                app = r.vm.split("/", 1)[0]
                self._event("vm-" + r.op, f"{r.vm}: {r.op}" + (f" ({r.error})" if r.error else ""),
                            app)
            from merkat.service.failures import fail_dead

            fail_dead(self)  # no ghost running: gone for good → failed, before the charge
            from merkat.service.probes import apply_readings

            apply_readings(self)
            quotas.bound_growth(self)  # each platform's nvms_max from its owner's quotas
            t_period = time.perf_counter()
            record = self._step(now)
            elapsed = time.perf_counter() - t_period
            applied = self.driver.report  # the period's (an end below applies its own)
            self._report_events(applied)
            from merkat.service.applied import settle_applied

            settle_applied(self, record.index)  # resizes refused: billed at what was applied
            fail_dead(self, refund_period=record.index)  # VMs that could not be created
            refund_failed_starts(self.driver, applied, record.index, self.paid,
                                 self._event)  # retried in the next period
            self._charges(record.index)
            from merkat.service.deadlines import report

            report(self)  # deadline at risk, met, missed
            self._sync(now)
            self.store.add_price(record.index, now, record.prices.get("cpu", 0.0),
                                 record.prices.get("memory", 0.0))
            for observe in self.observers:  # e.g. the Prometheus metrics (merkat.web)
                observe(self.platform, record, elapsed)
            return {"index": record.index, "time": now, "prices": record.prices,
                    "vms": record.vms, "charged": record.charged / 1e6}

    def _step(self, now: float) -> Any:
        """THE call of the period on the wall clock: one step of the runtime driver."""
        return self.driver.step(now)

    def start_queued(self) -> list[str]:
        """Admission between periods (Merkat §4.2.2): the platforms admitted since the last
        period whose start condition holds at the last prices start now, beside the running
        VMs, paying for the rest of the period (:meth:`Driver.admission_point
        <merkat.runtime.driver.Driver.admission_point>`); the others wait for the next period.
        Returns the names of the platforms that started."""
        with self.lock:
            if not self.driver.admits_between:
                return []
            queued = [app.spec.id for app in self.platform.queued()]
            if not queued:
                return []
            self._batch = []
            try:
                now = self.clock()
                # the next period's time (a loop not running: one period from now)
                until = self.next_period if self.next_period > now else now + self.config.period
                report = self.driver.admission_point(now, until)
                if report is None:
                    return []
                self._report_events(report)
                from merkat.service.failures import fail_dead

                fail_dead(self, refund_period=self.platform.index)
                refund_failed_starts(self.driver, report, self.platform.index, self.paid,
                                     self._event, max(0.0, min(1.0, (until - now)
                                                                / self.platform.period)))
                self._charges(self.platform.index)
                self._sync(now)
                return sorted(a for a in queued
                              if self.platform.apps[a].status is AppStatus.RUNNING)
            finally:
                batch, self._batch = self._batch, None
                self.store.add_events(batch)

    def _report_events(self, report: ApplyReport | None) -> None:
        """Events for the backend's report of the plan it just applied: failures, and the
        starts, suspends, resumes, migrations and shutdowns (:data:`VM_EVENTS`)."""
        for r in report.ops if report is not None else ():
            app = r.vm.split("/", 1)[0]
            if r.error:
                self._event("vm-error", f"{r.vm}: {r.op} failed: {r.error}", app)
            elif r.op in VM_EVENTS:
                note = r.reason  # what a done operation says (kubernetes: a notice, a move)
                self._event(VM_EVENTS[r.op], f"{r.vm}: {r.op}" + (f" ({note})" if note else ""),
                            app)

    def run(self, stop: threading.Event, on_period: Callable[[dict[str, Any]], None] | None = None
            ) -> None:
        """The wall-clock loop until ``stop`` is set: :func:`merkat.service.loop.run_loop`
        (admission every ``admission`` s, a period every ``period`` s, failures retried with
        back-off, missed periods not replayed)."""
        from merkat.service.loop import run_loop

        run_loop(self, stop, on_period)

    def close(self) -> None:
        self.monitors.close()
        with self.lock:
            self.backend.close()

    # --- internals --------------------------------------------------------------------------

    def _charges(self, period: int) -> None:
        """One ``charge`` event per platform that paid for its VMs this period."""
        for name in list(self.live):
            app = self.platform.apps.get(name)
            if app is None:
                continue
            delta = app.spent - self.paid.get(name, 0)
            if delta > 0:
                self.paid[name] = app.spent
                self._event("charge", f"platform {name} paid {delta / 1e6:g} for "
                            f"{len(app.columns[0])} VM(s) in period {period}", name)

    def _sync(self, now: float) -> None:
        """Write each admitted platform's state to the store, with an event on each change."""
        for name, live in list(self.live.items()):
            app = self.platform.apps[name]
            state = str(app.status)
            if state == live.state:
                continue
            row = self.store.platform(name)
            if row is None:
                continue
            old = live.state  # (the store's until now: an end rule has written the end)
            if app.status in ENDED:
                if name in self.driver.closing:  # its end rule (the ended row written with
                    continue  # its money's return, one transaction) failed: next period
                live.state = state
                self.ended[name] = self.live.pop(name)  # its last readings (status)
                usercmds.files_out(self, live.template, live.owner)
            else:
                values: dict[str, Any] = {"state": state}
                if app.start_time is not None and row.started is None:
                    values["started"] = app.start_time
                self.store.set_platform(name, **values)
                live.state = state
            self._plugin(live, name, old, state)
            msg = f"platform {name}: {old} -> {state}"
            if app.reason:
                msg += f" ({app.reason}; paid {app.spent / 1e6:g})"
            self._event("state", msg, name)
        from merkat.service.recovery import save_vms

        save_vms(self)

    def _plugin(self, live: Live, name: str, old: str, new: str) -> None:
        """Run the template's command for this transition as its owner (Merkat §4.3)."""
        usercmds.plugin(self, live.template, live.owner, name, old, new)

    def end_failed(self, name: str, owner: str, values: Mapping[str, Any]) -> None:
        """End platform ``name`` (not admitted) as failed with ``values`` and give its money
        back to ``owner`` in one transaction (recovery's: the driver's end rule,
        :meth:`merkat.service.money.StoreEnds.end_stored`)."""
        row = self.store.platform(name)
        account = row.account if row is not None and row.account else f"app:{name}"
        self.ends.end_stored(name, owner, account, values, "failed")

    def _end_row(self, name: str, owner: str, state: str, reason: str) -> None:
        self.store.set_platform(name, state=state, ended=self.clock(), outcome=reason)
        self.store.add_event("state", f"platform {name}: {state} ({reason})", name, owner)

    def _event(self, kind: str, message: str, platform: str | None = None) -> None:
        owner = None
        if platform is not None:
            live = self.live.get(platform)
            owner = live.owner if live else (
                self.platform.apps[platform].spec.owner if platform in self.platform.apps else None)
        if self._batch is not None:
            self._batch.append((kind, message, platform, owner, self.clock()))
        else:
            self.store.add_event(kind, message, platform, owner)

    def accounts_of(self, owner: str) -> list[str]:
        """The bank accounts ``owner`` may see: hers and her platforms'."""
        return [a.name for a in self.store.ledger.accounts()
                if a.name == owner or (a.kind is AccountKind.application and a.owner == owner)]


def _capacity(rows: list[tuple[float, float]]) -> Any:
    import numpy as np

    return np.array(rows, dtype=np.float64).reshape(-1, 2)
