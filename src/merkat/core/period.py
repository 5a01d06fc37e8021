"""One scheduling period, the heart of merkat (docs/architecture.md, "One scheduling period").

The period is a **decision**; the runtime driver (:mod:`merkat.runtime.driver`) is its only
caller and does every effect. Per period the driver renews the budgets (the economy), reads
the balances and each active application's :class:`Observed` (metrics, idle VMs, finished)
from the ledger and the backend, then:

1. :meth:`Platform.decide` — each controller turns an
   :class:`~merkat.control.types.Observation` into a :class:`~merkat.control.types.Demand`;
   the lifecycle table (:mod:`merkat.core.lifecycle`) refuses actions not allowed in the
   application's status; the demand becomes VM records, bids kept within the balance; an
   application that could not pay the reserve price for its VMs for ``keep_alive`` periods is
   stopped (``stopped-budget``); :func:`merkat.market.clear` over every VM that bids gives
   prices, placements, migrations and allocations; out comes a :class:`Decision` (the
   backend :class:`~merkat.core.backend.Plan`, the bills, the usage, the refusals);
2. the driver charges the bills (the economy's charging plugin); :meth:`Platform.withhold`
   takes the VMs of applications that could not pay out of the decision (suspended, or back
   to waiting: nothing runs for free);
3. the driver hands the plan to the backend, which reports each operation;
4. :meth:`Platform.commit` writes the decision into the records with the VM states the
   report gives (a failed boot or migration is written as not done and retried next period,
   a failed destroy or suspend is re-issued) and returns the :class:`PeriodRecord`.

The decision is data: :meth:`Platform.decide` computes a :class:`Decision` (ids and values:
each changed application's next state, :class:`~merkat.core.model.AppNext`) from the
records without changing them; only :meth:`Platform.commit` (and :meth:`Platform.settle`,
an admission's commit) writes them (:mod:`merkat.core.commit`). The controllers and a
stateful market mechanism keep their own memory, which a decision moves; the caches
(``App.const``, the shared price views, the last clearing) are not records. The parts live
beside this module: the per-application half (:mod:`~merkat.core.reconcile`), the next
states (:mod:`~merkat.core.draft`), the market's input
(:mod:`~merkat.core.market_input`), the plan and bills (:mod:`~merkat.core.plan`),
admission between periods (:mod:`~merkat.core.admission`).

No clock is read and no ledger or backend is called here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from merkat.control.base import Controller
from merkat.control.forecast import HISTORY
from merkat.control.registry import make_policy
from merkat.control.types import (
    Action,
    AppStatus,
    Demand,
    Observation,
    check_amounts,
    record_builder,
)
from merkat.core import admission, batch, commit, run_table
from merkat.core.admission_keep import AdmissionKeep
from merkat.core.backend import ApplyReport
from merkat.core.batch_slo import decide_slo1
from merkat.core.batch_vd import decide_vd1, rests_vd1
from merkat.core.bills import Bills
from merkat.core.draft import draft, install
from merkat.core.isolation import WAIT, ask, fail, reconcile
from merkat.core.lifecycle import ENDED, app_failure, app_transition
from merkat.core.market_input import MarketInput, Run, run_of
from merkat.core.model import (
    App,
    AppNext,
    AppSpec,
    Charged,
    Decision,
    NonFiniteBid,
    Observed,
    Ops,
    PeriodRecord,
    VMRecord,
    to_micro,
)
from merkat.core.period_log import PeriodLog
from merkat.core.plan import Plans
from merkat.core.reclear import LastClearing
from merkat.core.reconcile import Decider, end
from merkat.core.run_table import RunTable
from merkat.core.running import RunningRows
from merkat.defaults import KEEP_ALIVE, MECHANISM, MICRO, PERIOD_S, RESERVE_PRICE
from merkat.market import RESOURCES, BalanceParams, Clearing, Hosts, VMs
from merkat.market.mechanisms import ProportionalShare, make_mechanism

_new_record = record_builder(PeriodRecord)  # (PeriodRecord(...) without 21 frozen setattrs)

__all__ = ["ENDED", "MICRO", "App", "AppSpec", "AppStatus", "Charged", "Decision", "NonFiniteBid",
           "Observed", "PeriodRecord", "Platform", "VMRecord", "to_micro"]


@dataclass
class Platform:
    """The applications manager and market scheduler of one cluster (Merkat §4): its
    applications, their VMs and controllers, the last prices. The decision holds no ledger and
    no backend: the driver (:class:`~merkat.runtime.driver.Driver`) owns them.

    ``hosts`` is the cluster; ``period`` the scheduling period in seconds; ``reserve`` the
    minimum bid per VM and resource; ``balance`` the load-balancing parameters;
    ``keep_alive`` how many periods an application may fail to afford the reserve price of
    its VMs before it is stopped (``stopped-budget``, Merkat §4.2.4 iii).
    """

    hosts: Hosts
    period: float = PERIOD_S
    reserve: Mapping[str, float] = field(
        default_factory=lambda: dict.fromkeys(RESOURCES, RESERVE_PRICE))
    balance: BalanceParams = field(default_factory=BalanceParams)
    provider: str = "provider"
    keep_alive: int = KEEP_ALIVE
    history_size: int = HISTORY  # past prices shown: the forecasts' default window
    market: str = MECHANISM  # the mechanism (merkat.market.mechanisms), by name
    apps: dict[str, App] = field(default_factory=dict)
    active: dict[str, App] = field(default_factory=dict)
    records: PeriodLog = field(default_factory=PeriodLog)  # one per period, as columns
    index: int = 0
    # applications submitted since the last period (ids): the admission queue
    queue: list[str] = field(default_factory=list)
    # running applications of a policy with a batched form are decided in one numpy pass
    # (merkat.core.batch); False: every controller by the scalar path (the reference)
    batched: bool = True
    # True: a next state for every application decided, changed or not (the reference)
    every_next: bool = False

    def __post_init__(self) -> None:
        if not self.period > 0:
            raise ValueError(f"period must be > 0 seconds, got {self.period}")
        if self.keep_alive < 1:
            raise ValueError(f"keep_alive must be >= 1 period, got {self.keep_alive}")
        check_amounts("reserve", self.reserve)
        self.capacity = {
            r: float(self.hosts.capacity[:, k].sum()) if len(self.hosts) else 0.0
            for k, r in enumerate(RESOURCES)
        }
        self.prices: dict[str, float] = {r: 0.0 for r in RESOURCES}
        self.price_history: list[dict[str, float]] = []
        self.decider = Decider(self.period, self.capacity, self.reserve, self.keep_alive)
        self._reserve = self.decider.reserve_row
        self._reclear = LastClearing()  # the last clearing, again for the same input
        self._mechanism = make_mechanism(self.market)
        # its period's clearing is the admission points' (enforceable on the final mapping)
        self._proportional = type(self._mechanism) is ProportionalShare
        self._retry = Ops()  # destroy/suspend operations the backend failed: re-issued
        self._plans = Plans()  # the last period's plan and bills, reused with its
        self._bills = Bills()  # clearing when nothing they read changed
        self._running = RunningRows()  # the running VMs' rows, kept between admissions
        self._keep = AdmissionKeep()  # the last admission point's state (same period)
        self._input = MarketInput()  # the last market input, reused when the same
        self._joined = 0  # applications ever submitted (the roster's validity)
        self._roster: tuple[int, int, list[App], list[str]] = (-1, -1, [], [])
        # app id -> account (a bill's payer); changed or removed: a new dict (Economy.charge)
        self.accounts: dict[str, str] = {}

    # --- submission -------------------------------------------------------------------

    def submit(self, spec: AppSpec, controller: Controller | None = None,
               account: str | None = None) -> App:
        """Admit an application: its record and its controller (its account, named
        ``account``, default ``app:ID``, is opened and funded by the driver's economy)."""
        if spec.id in self.apps:
            raise ValueError(f"application {spec.id!r} already exists")
        if pending := self.pending(spec.id):  # (its VMs would have their ids)
            raise ValueError(f"application {spec.id!r}: the destroy of its VM {', '.join(pending)}"
                             " failed and is retried every period: the id is free once done")
        if spec.size < 1:
            raise ValueError(f"application {spec.id!r}: size must be >= 1")
        if spec.nvms_max < 1:
            raise ValueError(f"application {spec.id!r}: nvms_max must be >= 1")
        if any(r not in spec.vm_size for r in spec.trade):
            # a resource its VM template does not name is one it does not use: no bid for it
            # (a CPU-only application under the default trade of every resource)
            trade = tuple(r for r in spec.trade if r in spec.vm_size)
            if not trade:
                raise ValueError(
                    f"application {spec.id!r}: vm_size names none of the traded resources "
                    f"({', '.join(spec.trade)})"
                )
            spec = replace(spec, trade=trade)
        try:  # checked here once, not in every observation (before any account exists)
            check_amounts("vm_size", {r: spec.vm_size.get(r, 0.0) for r in spec.trade})
            check_amounts("vm_min", spec.vm_min)
            check_amounts("budget", {"budget": spec.budget, "renewal": spec.renewal})
        except ValueError as e:
            raise ValueError(f"application {spec.id!r}: {e}") from None
        ctl = controller or make_policy(spec.policy, **dict(spec.params))
        if ctl.reads_price_history:  # keep the prices it reads (at least history_size)
            self.history_size = max(self.history_size, ctl.price_history_periods)
        app = App(spec, ctl, account or f"app:{spec.id}")
        self.apps[spec.id] = app
        self.active[spec.id] = app
        if self.accounts.get(spec.id, app.account) != app.account:  # (see __init__)
            self.accounts = dict(self.accounts)  # an id used again
        self.accounts[spec.id] = app.account
        self._joined += 1
        self.queue.append(spec.id)
        return app

    @property
    def admits_between(self) -> bool:
        """Whether applications can start between periods (a stateless mechanism; see
        :mod:`merkat.core.admission`)."""
        return self._mechanism.stateless

    def roster(self) -> tuple[list[App], list[str]]:
        """The active applications, in ``active``'s order, and their accounts' names: lists
        kept between periods while ``active`` holds the same applications (the driver reads
        them every period; this replaces building both lists from ``active`` each time). They
        are rebuilt when an application joined (:meth:`submit` counts them) or left (``active``
        is shorter than the kept list: whoever removed it); the caller must not change them.
        ``tests/test_period_roster.py`` pins them to a fresh read after every change."""
        joined, n, apps, names = self._roster
        active = self.active
        if joined != self._joined or n != len(active):
            apps = list(active.values())
            names = [a.account for a in apps]
            self._roster = (self._joined, len(apps), apps, names)
        return apps, names

    def queued(self) -> list[App]:
        """The applications in the admission queue still waiting for their first start."""
        apps = self.apps
        return [apps[a] for a in self.queue
                if apps[a].status is AppStatus.WAITING and apps[a].active]

    def admit(self, now: float, until: float, balances: Mapping[str, int],
              observed: Mapping[str, Observed]) -> Decision:
        """An admission point between periods (:func:`merkat.core.admission.admit`): a
        decision that takes the whole queue, changing no record (:meth:`settle` commits it)."""
        market = admission.Market(self.hosts, self.decider, self.prices, self.price_history,
                                  self.apps, tuple(self.active.values()), self.index,
                                  self._running, self._keep)
        decision = admission.admit(market, self.queued(), now, until, balances, observed)
        decision.taken = tuple(self.queue)
        return decision

    # --- the decision -----------------------------------------------------------------

    def decide(
        self, now: float, balances: Mapping[str, int], observed: Mapping[str, Observed]
    ) -> Decision:
        """The period at time ``now``: ``balances`` of the active applications' accounts (after
        this period's renewal), ``observed`` per active application id. Changes no record
        (see the module docstring): :meth:`commit` writes what it decides.

        ``Decision.apps`` holds only the changed applications: one handed its clean next state
        (``draft.rebid_columns``) has a run, no entry unless the plan moves or reallocates it
        (``Plans.reused``); ``every_next``: every entry (the reference, test_unchanged.py)."""
        ops = Ops(list(self._retry.destroy), list(self._retry.suspend))
        refused: list[str] = []
        nexts: dict[str, AppNext] = {}
        # the market's runs (market_input.bidding's), each added as its application is
        # decided: one visit per application (market_input.run_of)
        runs: list[Run] = []
        bidding = 0
        decider, prices, history = self.decider, self.prices, self.price_history
        running, suspended = AppStatus.RUNNING, AppStatus.SUSPENDED
        order = list(self.active.values())  # (keyed by spec.id)
        # one pass per application (merkat.core.batch): a batched form or a resting check
        # decides it at once, else its controller is asked
        fused = batch.Pass(decider, now, prices, history) if self.batched else None
        broke_since, const_of = decider.broke_since, decider.const
        quiet: list[AppNext] = []  # clean next states left out of nexts (see the plan)
        every = self.every_next
        for app in order:
            app_id = app.spec.id
            balance = balances[app.account]
            # Decider.broke_since's first test inlined (the usual answer: it can pay)
            const = app.const or const_of(app)
            cost = const.reserve_cost
            n, size = len(app.columns[0]), app.spec.size
            since: float | None = None
            if balance < cost * (n if n > size else size):
                since, broke = broke_since(app, balance, now)
                if broke:
                    nx = nexts[app_id] = draft(app)
                    nx.broke_since = since
                    end(nx, now, f"could not pay the reserve price for {self.keep_alive} "
                        "periods", observed[app_id].finished, ops, "stopped-budget")
                    bidding += run_of(nx, const, runs)
                    continue
            seen = observed[app_id]
            demand: Demand | str | None = None
            if fused is not None and n:
                ln = app.lane  # (batch.lane's check, inlined)
                if ln is None or ln.controller is not app.controller or ln.spec is not app.spec:
                    ln = batch.lane(app)
                k = ln.slo1
                status = app.status
                if k is not None and status is running:  # one resource: one function
                    if k.per.at is not fused:
                        fused.take(k.per, ln)
                    made = (decide_slo1(app, k, balance, seen) if k.slo
                            else decide_vd1(app, k, balance, seen))
                elif (k is not None and status is suspended and not k.slo
                      and ln.rest is not None):  # (Pass.resting's, in one function)
                    if k.per.at is not fused:
                        fused.take(k.per, ln)
                    made = WAIT if rests_vd1(app, k, seen) else None
                else:
                    made = fused(app, balance, seen)
                if made is not None:
                    if isinstance(made, dict):  # a bid its balance does not pay as it is
                        nx = nexts[app_id] = draft(app)
                        nx.broke_since = since
                        decider.rebid(app, nx, made, balance)
                        bidding += run_of(nx, const, runs)
                        continue
                    if not isinstance(made, Demand):  # its next state (its bid paid)
                        # (a batched next state runs every VM of its columns, none
                        # suspended: its whole run, market_input.run_of's answer)
                        runs.append((made, const, None))
                        bidding += n
                        if made is app.clean and since == made.broke_since and not every:
                            quiet.append(made)  # its record, unchanged so far: no entry
                            continue
                        nexts[app_id] = made
                        made.broke_since = since
                        continue
                    demand = made
            if demand is None:
                obs = decider.observe(app, now, balance, seen, prices, history)
                demand = ask(app.controller, obs)
            if isinstance(demand, str):  # its controller raised: it fails, alone
                nx = nexts[app_id] = draft(app)
                nx.broke_since = since
                fail(nx, now, demand, ops)
                bidding += run_of(nx, const, runs)
                continue
            if demand.action is Action.NONE and app.status is not running:
                if since != app.broke_since:  # waiting or suspended, and staying so
                    nx = nexts[app_id] = draft(app)
                    nx.broke_since = since
                    bidding += run_of(nx, const, runs)
                continue
            nx = draft(app)
            nx.broke_since = since
            # (a bid that is not a finite number fails this application alone)
            nx = nexts[app_id] = reconcile(decider, app, nx, demand, now, balance, seen, ops,
                                           refused)
            bidding += run_of(nx, const, runs)

        vms = self._input(runs, bidding)
        result = self._clear(vms)
        prices = {r: float(result.price[k]) for k, r in enumerate(RESOURCES)}
        table = RunTable(runs) if run_table.FAST else None  # (the runs, read once)
        plan = self._plans(now, self.period, runs, result, ops, vms.host, table)
        if quiet and not self._plans.reused:  # the plan moved or reallocated some of them
            for nx in quiet:
                if nx.moved or nx.allocs is not nx.base[5]:
                    nexts[nx.id] = nx
        bills, usage = self._bills(runs, result, vms.host, vms.bid, prices, table)
        alloc = result.allocation.sum(axis=0) if bidding else np.zeros(len(RESOURCES))
        decision = Decision(
            index=self.index, time=now, plan=plan, bills=bills, usage=usage,
            refused=tuple(refused), prices=prices,
            allocated={r: float(alloc[k]) for k, r in enumerate(RESOURCES)}, bidding=bidding,
            apps=nexts, taken=tuple(self.queue),
        )
        if self._proportional:  # (its clearing, for the first admission point after it)
            self._keep.decided(decision, runs, vms.ids, vms.bid, vms.cap, vms.minimum,
                               result.host, result.allocation, result.capped)
        return decision

    def stop(self, app_id: str, now: float, reason: str, failed: bool = False
             ) -> tuple[str, ...]:
        """End application ``app_id`` now, through the lifecycle table (its owner's STOP, or
        with ``failed`` a failure of the world: ``app_failure``; ``ValueError`` when refused)
        and the end rule of a period's STOP; returns its VMs, for the driver to destroy. An
        effect outside a period (the driver's :meth:`~merkat.runtime.driver.Driver.stop`):
        written at once."""
        app = self.apps[app_id]
        nxt = app_failure(app.status) if failed else app_transition(app.status, Action.STOP)
        if not isinstance(nxt, AppStatus):
            raise ValueError(f"application {app_id!r}: {nxt}")
        ops = Ops()
        nx = draft(app)
        end(nx, now, reason, False, ops, "failed" if failed else "")
        nx.status = nxt  # (STOPPED, or FAILED: the table's answer)
        install(app, nx)
        self.active.pop(app_id, None)
        if app_id in self.queue:
            self.queue.remove(app_id)
        return tuple(ops.destroy)

    def pending(self, app_id: str) -> tuple[str, ...]:
        """``app_id``'s VMs whose failed destroy is re-issued (it cannot be submitted again)."""
        return tuple(v for v in self._retry.destroy if v.rpartition("/")[0] == app_id)

    def withdraw(self, app_id: str) -> None:
        """Undo the :meth:`submit` of ``app_id`` whose admission could not be completed (its
        account could not be funded): it never took part in a period."""
        self.apps.pop(app_id, None)
        self.accounts = {a: x for a, x in self.accounts.items() if a != app_id}
        self.active.pop(app_id, None)
        if app_id in self.queue:
            self.queue.remove(app_id)

    def forget(self, app_ids: Collection[str]) -> None:
        """Drop the records of ended applications (``ValueError`` for an active one): a long
        run keeps what it needs of them elsewhere (:meth:`Driver.forget
        <merkat.runtime.driver.Driver.forget>`). A destroy of theirs still to be re-issued
        stays."""
        for app_id in app_ids:
            if app_id in self.active:
                raise ValueError(f"application {app_id!r} is active: it cannot be forgotten")
        for app_id in (gone := set(app_ids)):
            self.apps.pop(app_id, None)
        self.accounts = {a: x for a, x in self.accounts.items() if a not in gone}  # (__init__)
        if gone.intersection(self.queue):
            self.queue[:] = [a for a in self.queue if a not in gone]

    def reissue(self, report: ApplyReport) -> None:
        """The destroys and suspends ``report`` says failed are re-issued by the next
        period (a plan applied outside a period: an end)."""
        for o in report.failed:
            if o.op == "destroy":
                self._retry.destroy.append(o.vm)
            elif o.op == "suspend":
                self._retry.suspend.append(o.vm)

    def withhold(self, decision: Decision, unpaid: Collection[str]) -> Decision:
        """``decision`` without the VMs of the ``unpaid`` applications (ids):
        :func:`merkat.core.commit.withhold` (no record changes)."""
        return commit.withhold(decision, unpaid, self.apps)

    def commit(self, decision: Decision, report: ApplyReport, charged: Charged) -> PeriodRecord:
        """Write the period's ``decision``, the backend's ``report`` of its plan and the
        economy's ``charged`` into the platform's records; return (and keep) the period's
        record."""
        failures, self._retry = commit.settle(self.apps, decision, report, charged)
        self._take(decision)
        self._keep.handed(self.hosts, self._reserve, self.index + 1, decision, self.apps,
                          bool(failures))
        self.prices = dict(decision.prices)
        self.price_history.append(self.prices)
        del self.price_history[: -self.history_size]
        self.decider.forget_prices()
        statuses = [a.status for a in self.active.values()]
        plan = decision.plan
        record = _new_record(
            index=self.index,
            time=decision.time,
            prices=dict(decision.prices),
            allocated=dict(decision.allocated),
            capacity=dict(self.capacity),
            running_apps=statuses.count(AppStatus.RUNNING),
            waiting_apps=statuses.count(AppStatus.WAITING),
            suspended_apps=statuses.count(AppStatus.SUSPENDED),
            vms=decision.bidding,
            created=len(plan.create),
            destroyed=len(plan.destroy),
            migrations=len(plan.migrate),
            suspended=len(plan.suspend),
            resumed=len(plan.resume),
            charged=charged.total,
            refused=decision.refused,
            failed=tuple(failures),
            unpaid=tuple(sorted(charged.unpaid)),
            minted=charged.minted,
            redistributed=charged.redistributed,
        )
        self.records.append(record)
        self.index += 1
        return record

    def settle(self, decision: Decision, report: ApplyReport, charged: Charged) -> list[str]:
        """Commit an admission's ``decision`` (:meth:`admit`): as :meth:`commit`, without a
        record; the failed destroys and suspends join those the next period re-issues.
        Returns the failed operations, one line each."""
        failures, retry = commit.settle(self.apps, decision, report, charged)
        self._retry.destroy.extend(retry.destroy)
        self._retry.suspend.extend(retry.suspend)
        self._take(decision)
        return failures

    def _take(self, decision: Decision) -> None:
        """The queue without what ``decision`` took; the applications it ended leave
        ``active``."""
        if decision.taken:
            taken = set(decision.taken)
            self.queue[:] = [a for a in self.queue if a not in taken]
        for app_id, nx in decision.apps.items():
            if nx.status in ENDED:
                self.active.pop(app_id, None)

    def observe(self, app: App, now: float, balance: int, seen: Observed) -> Observation:
        """What ``app``'s controller sees this period
        (:meth:`~merkat.core.reconcile.Decider.observe`)."""
        return self.decider.observe(app, now, balance, seen, self.prices, self.price_history)

    # --- the market -------------------------------------------------------------------

    def _clear(self, vms: VMs) -> Clearing:
        """The mechanism's clearing of ``vms``, or the last one when its input was the same
        (:class:`~merkat.core.reclear.LastClearing`)."""
        return self._reclear(self._mechanism, self.hosts, self.balance, self._reserve, vms)
