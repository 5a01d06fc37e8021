"""One scheduling period, the heart of merkat (docs/architecture.md, "One scheduling period").

:meth:`Platform.run_period` runs, top-down, once per period:

1. **renew** — each active application's account gets its renewal, never above its cap;
2. **decide** — each controller turns an :class:`~merkat.control.types.Observation` into a
   :class:`~merkat.control.types.Demand`; :meth:`Platform._reconcile` turns the demand into VM
   records (create, destroy, suspend, resume, new bids), keeping the bids within the balance;
3. **clear** — :func:`merkat.market.clear` over every VM that bids: prices, placement of new
   VMs, migrations, allocations;
4. **apply** — the backend gets one :class:`~merkat.platform.backend.Plan`;
5. **charge** — every placed VM pays its bid for the period to the provider (Merkat §2.2),
   in one ledger transaction;
6. **record** — a :class:`PeriodRecord` (prices, use, operations) is returned and kept.

The simulator calls it with a virtual clock and :class:`~merkat.backends.sim.SimBackend`; the
live service calls it with the wall clock and a real backend. No clock is read here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

import numpy as np
from mypy_extensions import mypyc_attr

from merkat.bank.ledger import AccountKind, Ledger
from merkat.bank.policies import Allowance, ChargeByBid, InitialBudget, Renewal
from merkat.control.base import Controller
from merkat.control.registry import make_policy
from merkat.control.types import (
    Action,
    Demand,
    Observation,
    VMState,
    VMView,
    check_amounts,
    new_budget,
    new_observation_unchecked,
    new_vm_view,
)
from merkat.market import NO_HOST, RESOURCES, BalanceParams, Clearing, Hosts, VMs, clear
from merkat.platform.backend import Backend, Plan, VMPlacement

MICRO = 1_000_000


def to_micro(credits: float) -> int:
    """Credits (float) to the ledger's integer micro-credits, rounded to the nearest."""
    return round(credits * MICRO)


class AppStatus(StrEnum):
    """Where an application is in its life."""

    WAITING = "waiting"  # submitted, no VM yet (postponed or queued)
    RUNNING = "running"
    SUSPENDED = "suspended"
    FINISHED = "finished"  # all work done
    STOPPED = "stopped"  # stopped by its controller before finishing (deadline out of reach...)


ENDED = (AppStatus.FINISHED, AppStatus.STOPPED)


@dataclass(frozen=True)
class AppSpec:
    """An application as submitted (the template of Merkat Fig. 5, reduced to what the
    period loop needs).

    ``vm_size``: each VM's maximum useful allocation (cores, MiB); ``vm_min``: what a node must
    hold for one VM (memory); ``size``: VMs to start. ``budget``: initial credits, ``renewal``:
    credits added per period, never above ``budget_cap`` (default: the initial budget, Themis
    §III-A). ``trade``: resources the application bids on (others get no bid: CPU-only runs).
    """

    id: str
    policy: str
    size: int
    vm_size: Mapping[str, float]
    submit_time: float
    budget: float
    renewal: float = 0.0
    budget_cap: float | None = None
    deadline: float | None = None
    vm_min: Mapping[str, float] = field(default_factory=dict)
    params: Mapping[str, Any] = field(default_factory=dict)
    owner: str = "users"
    nvms_max: int = 1_000_000
    trade: tuple[str, ...] = RESOURCES


@dataclass
class VMRecord:
    """The platform's view of one VM. ``bid`` and ``alloc`` hold the resources its application
    trades (:attr:`AppSpec.trade`), in that order; the others are neither bid for nor limited."""

    id: str
    app: str
    state: VMState
    host: int = NO_HOST
    bid: dict[str, float] = field(default_factory=dict)
    alloc: dict[str, float] = field(default_factory=dict)
    new: bool = True  # created this period (not yet placed)
    # The controller's view of this VM: reused while its state, alloc and bid are the same
    # objects (bid and alloc dicts are replaced, never mutated, and kept when a new value
    # equals the old one; the view shares them).
    view: VMView | None = field(default=None, repr=False, compare=False)


@dataclass
class App:
    """One application under its controller."""

    spec: AppSpec
    controller: Controller
    account: str
    status: AppStatus = AppStatus.WAITING
    vms: list[VMRecord] = field(default_factory=list)
    start_time: float | None = None
    end_time: float | None = None
    reason: str = ""
    suspensions: int = 0
    resumes: int = 0
    vm_count: int = 0  # VMs ever created (for unique ids)
    spent: int = 0  # micro-credits paid
    const: _AppConst | None = field(default=None, repr=False, compare=False)
    # The VM views of the last observation: valid until the VM records change, which only
    # happens in Platform._reconcile (which drops them) and Platform._plan (on running apps,
    # whose views _reconcile has dropped earlier in the same period).
    views: tuple[VMView, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def active(self) -> bool:
        return self.status not in ENDED


@dataclass(frozen=True)
class PeriodRecord:
    """What happened in one period."""

    index: int
    time: float
    prices: dict[str, float]
    allocated: dict[str, float]
    capacity: dict[str, float]
    running_apps: int
    waiting_apps: int
    suspended_apps: int
    vms: int
    created: int
    destroyed: int
    migrations: int
    suspended: int
    resumed: int
    charged: int  # micro-credits


@mypyc_attr(allow_interpreted_subclasses=True)
@dataclass
class Platform:
    """The applications manager and market scheduler of one cluster (Merkat §4).

    ``hosts`` and ``ledger`` are the cluster and the bank; ``backend`` acts on decisions;
    ``period`` is the scheduling period in seconds; ``reserve`` the minimum bid per VM and
    resource; ``balance`` the load-balancing parameters; ``provider`` the account that
    receives the charges.
    """

    hosts: Hosts
    ledger: Ledger
    backend: Backend
    period: float = 300.0
    reserve: Mapping[str, float] = field(default_factory=lambda: {r: 0.001 for r in RESOURCES})
    balance: BalanceParams = field(default_factory=BalanceParams)
    provider: str = "provider"
    history_size: int = 12
    apps: dict[str, App] = field(default_factory=dict)
    active: dict[str, App] = field(default_factory=dict)
    records: list[PeriodRecord] = field(default_factory=list)
    index: int = 0

    def __post_init__(self) -> None:
        if not self.period > 0:
            raise ValueError(f"period must be > 0 seconds, got {self.period}")
        check_amounts("reserve", self.reserve)
        if not self.ledger.has_account(self.provider):
            self.ledger.create_account(self.provider, AccountKind.provider)
        self.capacity = {
            r: float(self.hosts.capacity[:, k].sum()) if len(self.hosts) else 0.0
            for k, r in enumerate(RESOURCES)
        }
        self.prices: dict[str, float] = {r: 0.0 for r in RESOURCES}
        self.price_history: list[dict[str, float]] = []
        self.allowances: dict[str, Allowance] = {}
        self.renewal = Renewal()
        self.charger = ChargeByBid(self.provider)
        self._reserve = np.array([self.reserve.get(r, 0.0) for r in RESOURCES])
        self._last_clearing: tuple[Hosts, BalanceParams, np.ndarray, VMs, Clearing] | None = None
        # Per traded-resource tuple: (prices it was built from, prices, past prices).
        self._shared: dict[
            tuple[str, ...],
            tuple[dict[str, float], dict[str, float], tuple[dict[str, float], ...]],
        ] = {}

    # --- submission -------------------------------------------------------------------

    def submit(self, spec: AppSpec, controller: Controller | None = None) -> App:
        """Admit an application: its account, its initial budget, its controller."""
        if spec.id in self.apps:
            raise ValueError(f"application {spec.id!r} already exists")
        if spec.size < 1:
            raise ValueError(f"application {spec.id!r}: size must be >= 1")
        if spec.nvms_max < 1:
            raise ValueError(f"application {spec.id!r}: nvms_max must be >= 1")
        try:  # checked here once, not in every observation (before any account exists)
            check_amounts("vm_size", {r: spec.vm_size.get(r, 0.0) for r in spec.trade})
            check_amounts("vm_min", spec.vm_min)
        except ValueError as e:
            raise ValueError(f"application {spec.id!r}: {e}") from None
        ledger = self.ledger
        if not ledger.has_account(spec.owner):
            ledger.create_account(spec.owner, AccountKind.user)
        account = f"app:{spec.id}"
        ledger.create_account(account, AccountKind.application, owner=spec.owner)
        initial = to_micro(spec.budget)
        if initial > 0:
            InitialBudget(initial).apply(ledger, account, self.index)
        rate = to_micro(spec.renewal)
        cap = to_micro(spec.budget if spec.budget_cap is None else spec.budget_cap)
        if rate > 0 and cap > 0:
            self.allowances[account] = Allowance(rate, cap)
        ctl = controller or make_policy(spec.policy, **dict(spec.params))
        app = App(spec, ctl, account)
        self.apps[spec.id] = app
        self.active[spec.id] = app
        return app

    # --- the period -------------------------------------------------------------------

    def run_period(self, now: float) -> PeriodRecord:
        """Run one scheduling period at time ``now`` (seconds); see the module docstring."""
        active = list(self.active.values())
        # 1. renew
        due = {
            a.account: self.allowances[a.account] for a in active if a.account in self.allowances
        }
        self.renewal.apply(self.ledger, self.index, due)
        balances = self.ledger.balances([a.account for a in active]) if active else {}

        # 2. decide and reconcile
        ops = _Ops()
        for app in active:
            obs = self.observe(app, now, balances[app.account])
            demand = app.controller.decide(obs)
            self._reconcile(app, demand, now, balances[app.account], ops)
            if not app.active:
                del self.active[app.spec.id]

        # 3. clear
        runs = self._bidding()
        bidding = [vm for _, vms in runs for vm in vms]
        result = self._clear(self._market_vms(runs, len(bidding)))
        self.prices = {r: float(result.price[k]) for k, r in enumerate(RESOURCES)}
        self.price_history.append(self.prices)
        del self.price_history[: -self.history_size]
        self._shared.clear()

        # 4. apply
        plan = self._plan(now, runs, result, ops)
        self.backend.apply(plan)

        # 5. charge
        charged = self._charge(runs)

        # 6. record
        alloc = result.allocation.sum(axis=0) if bidding else np.zeros(len(RESOURCES))
        statuses = [a.status for a in self.active.values()]
        record = PeriodRecord(
            index=self.index,
            time=now,
            prices=dict(self.prices),
            allocated={r: float(alloc[k]) for k, r in enumerate(RESOURCES)},
            capacity=dict(self.capacity),
            running_apps=statuses.count(AppStatus.RUNNING),
            waiting_apps=statuses.count(AppStatus.WAITING),
            suspended_apps=statuses.count(AppStatus.SUSPENDED),
            vms=len(bidding),
            created=len(plan.create),
            destroyed=len(plan.destroy),
            migrations=len(plan.migrate),
            suspended=len(plan.suspend),
            resumed=len(plan.resume),
            charged=charged,
        )
        self.records.append(record)
        self.index += 1
        return record

    # --- step 2: observation and reconciliation ---------------------------------------

    def observe(self, app: App, now: float, balance: int) -> Observation:
        """What ``app``'s controller sees this period."""
        spec = app.spec
        trade = spec.trade
        const = app.const or self._const(app)
        shared = self._shared.get(trade)
        if shared is None or shared[0] is not self.prices:
            shared = self._shared_view(trade)
        renewal = self.allowances.get(app.account)
        views = app.views
        if views is None or len(views) != len(app.vms):
            views = app.views = self._views(app)
        idle = self.backend.idle(spec.id) if app.status is AppStatus.RUNNING else frozenset()
        if idle:  # idle workers, released first by horizontal policies (VMView.busy)
            views = tuple(replace(v, busy=False) if v.id in idle else v for v in views)
        return new_observation_unchecked(  # its parts are checked once (submit, prices)
            time=now,
            period=self.period,
            prices=shared[1],
            capacity=const.capacity,
            vm_size=const.vm_size,
            budget=new_budget(balance=balance / MICRO,
                              renewal=renewal.rate / MICRO if renewal else 0.0),
            bid_min=const.bid_min,
            vms=views,
            metrics=self.backend.metrics(spec.id),
            price_history=shared[2] if const.history else (),
            deadline=spec.deadline,
            submit_time=spec.submit_time,
            size=spec.size,
            nvms_max=spec.nvms_max,
        )

    @staticmethod
    def _views(app: App) -> tuple[VMView, ...]:
        """The controller's view of each VM of ``app``, reused per VM while its state,
        allocation and bid are the same objects (views share the VM's mappings, which are
        replaced, never mutated)."""
        views = []
        for vm in app.vms:
            view = vm.view
            if view is None or view.alloc is not vm.alloc or view.bid is not vm.bid or (
                view.state is not vm.state
            ):
                view = vm.view = new_vm_view(id=vm.id, state=vm.state, alloc=vm.alloc, bid=vm.bid)
            views.append(view)
        return tuple(views)

    def _shared_view(
        self, trade: tuple[str, ...]
    ) -> tuple[dict[str, float], dict[str, float], tuple[dict[str, float], ...]]:
        """This period's prices and past prices restricted to ``trade``, built once per period
        and shared by the observations (which never mutate them)."""
        prices = {r: self.prices[r] for r in trade}
        check_amounts("prices", prices)
        shared = (
            self.prices,
            prices,
            tuple({r: p[r] for r in trade} for p in self.price_history[:-1]),
        )
        self._shared[trade] = shared
        return shared

    def _const(self, app: App) -> _AppConst:
        """What never changes in ``app``'s observations and market rows (built on first use)."""
        spec = app.spec
        trade = spec.trade
        const = _AppConst(
            vm_size={r: spec.vm_size[r] for r in trade},
            capacity={r: self.capacity[r] for r in trade},
            bid_min={r: float(self.reserve.get(r, 0.0)) for r in trade},
            cap_row=[spec.vm_size.get(r, 0.0) for r in RESOURCES],
            min_row=[spec.vm_min.get(r, 0.0) for r in RESOURCES],
            columns=tuple((r, RESOURCES.index(r) if r in RESOURCES else -1) for r in trade),
            zero=dict.fromkeys(trade, 0.0),
            history=type(app.controller).reads_price_history,
        )
        check_amounts("capacity", const.capacity)
        check_amounts("vm_size", const.vm_size)
        check_amounts("bid_min", const.bid_min)
        app.const = const
        return const

    def _reconcile(self, app: App, demand: Demand, now: float, balance: int, ops: _Ops) -> None:
        """Turn a demand into VM records; the bids of the period never exceed the balance."""
        action = demand.action
        if action is Action.NONE and app.status is not AppStatus.RUNNING:
            return  # waiting or suspended, and staying so: no VM bids, nothing changes
        app.views = None  # the VM records change below (and in this period's plan)
        if action is Action.STOP:
            ops.destroy.extend(vm.id for vm in app.vms)
            app.vms = []
            app.status = (
                AppStatus.FINISHED if self.backend.finished(app.spec.id) else AppStatus.STOPPED
            )
            app.end_time = now if app.end_time is None else app.end_time
            app.reason = demand.reason
            return
        if action is Action.SUSPEND:
            for vm in app.vms:
                if vm.state is not VMState.SUSPENDED:
                    vm.state = VMState.SUSPENDED
                    ops.suspend.append(vm.id)
            app.status = AppStatus.SUSPENDED
            app.suspensions += 1
            return
        if action is Action.START:
            for _ in range(max(demand.nvms, 1)):
                app.vm_count += 1
                app.vms.append(
                    VMRecord(
                        f"{app.spec.id}/vm{app.vm_count}",
                        app.spec.id,
                        VMState.BOOTING,
                        bid=dict(demand.new_vm_bid),
                    )
                )
            app.status = AppStatus.RUNNING
            if app.start_time is None:
                app.start_time = now
        elif action is Action.RESUME:
            for vm in app.vms:
                vm.state = VMState.RESUMING
                vm.host = NO_HOST
                vm.new = True
            app.status = AppStatus.RUNNING
            app.resumes += 1
        if app.status is not AppStatus.RUNNING:
            return  # waiting or suspended: no VM bids
        # Horizontal scaling: release the named VMs (or the newest) or add VMs.
        if demand.nvms < len(app.vms) and action is Action.NONE:
            drop = set(demand.release) or {vm.id for vm in app.vms[demand.nvms :]}
            ops.destroy.extend(vm.id for vm in app.vms if vm.id in drop)
            app.vms = [vm for vm in app.vms if vm.id not in drop]
        elif demand.nvms > len(app.vms) and action is Action.NONE:
            for _ in range(demand.nvms - len(app.vms)):
                app.vm_count += 1
                app.vms.append(
                    VMRecord(
                        f"{app.spec.id}/vm{app.vm_count}",
                        app.spec.id,
                        VMState.BOOTING,
                        bid=dict(demand.new_vm_bid),
                    )
                )
        trade = app.spec.trade  # a VM's bid holds the traded resources only
        src: Mapping[str, float] | None = None
        bid: dict[str, float] = {}
        fresh = False  # ``bid`` is new and no VM holds it yet
        bids, new_bid = demand.bids, demand.new_vm_bid
        for vm in app.vms:
            # VMs usually bid alike: one dict per distinct bid, shared by the VMs that bid it
            # (the market's rows, the charge and the controllers' sums go by shared dicts);
            # the first VM's dict is kept when it is equal (its controller view stays valid).
            b = bids.get(vm.id, new_bid)  # Demand.bid_for, inlined
            if b is not src and (src is None or b != src):
                bid = {r: float(b.get(r, 0.0)) for r in trade}
                fresh = True
            src = b
            if vm.bid is not bid:
                if fresh and vm.bid == bid:
                    bid = vm.bid
                else:
                    vm.bid = bid
            fresh = False
        self._within_budget(app, balance)

    def _within_budget(self, app: App, balance: int) -> None:
        """Scale the app's bids down to what its balance pays, never under the reserve.

        A controller should never bid beyond its balance (bid_max is part of its observation);
        if one does, its bids are scaled down in proportion. An application that cannot even pay
        the reserve price for its VMs bids the reserve and is charged what it has (the charge
        policy then leaves its VMs unpaid, which the next period's balance shows).
        """
        total: float = 0.0
        last: dict[str, float] | None = None
        x: float = 0.0
        for vm in app.vms:
            if vm.bid is not last:
                last = vm.bid
                x = sum(last.values())
            total += x
        if total <= 0 or to_micro(total) <= balance:
            return
        k = balance / MICRO / total
        last = None
        scaled: dict[str, float] = {}
        for vm in app.vms:  # VMs that shared a bid share its scaled one
            if vm.bid is not last:
                last = vm.bid
                scaled = {r: max(b * k, self.reserve.get(r, 0.0)) for r, b in last.items()}
            vm.bid = scaled

    # --- step 3: the market's input ---------------------------------------------------

    def _bidding(self) -> list[tuple[App, list[VMRecord]]]:
        """The VMs that bid this period, in runs of one application each (in the order of
        ``active``): a waiting app has no VM, a suspended one only suspended VMs."""
        runs = []
        suspended = VMState.SUSPENDED
        for a in self.active.values():
            if a.status is AppStatus.RUNNING:
                vms = a.vms
                for vm in vms:
                    if vm.state is suspended:
                        vms = [v for v in vms if v.state is not suspended]
                        break
                if vms:
                    runs.append((a, vms))
        return runs

    def _market_vms(self, runs: Sequence[tuple[App, list[VMRecord]]], n: int) -> VMs:
        """The market's input: one row per bidding VM, application by application. VMs that
        share one bid mapping (the usual case) share its row."""
        n_res = len(RESOURCES)
        ids: list[str] = []
        hosts: list[int] = []
        bids: list[float] = []
        caps: list[list[float]] = []  # one row per application
        mins: list[list[float]] = []
        counts: list[int] = []
        for app, vms in runs:
            ids += [vm.id for vm in vms]
            hosts += [vm.host for vm in vms]
            first = vms[0].bid
            row = [first.get(r, 0.0) for r in RESOURCES]
            shared = True
            for vm in vms:
                if vm.bid is not first:
                    shared = False
                    break
            if shared:
                bids += row * len(vms)
            else:
                last_bid = first
                for vm in vms:
                    if vm.bid is not last_bid:
                        last_bid = vm.bid
                        row = [last_bid.get(r, 0.0) for r in RESOURCES]
                    bids += row
            const = app.const or self._const(app)
            caps.append(const.cap_row)
            mins.append(const.min_row)
            counts.append(len(vms))
        shape = (n, n_res)
        return VMs(
            ids=tuple(ids),
            bid=np.array(bids, dtype=np.float64).reshape(shape),
            cap=np.repeat(np.array(caps, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
            host=np.array(hosts, dtype=np.int64),
            minimum=np.repeat(np.array(mins, dtype=np.float64).reshape(-1, n_res), counts, axis=0),
        )

    def _clear(self, vms: VMs) -> Clearing:
        """:func:`merkat.market.clear`, or the last period's clearing when its input was the same
        (the same bids, caps, minimums and hosts, on the same cluster with the same reserve and
        parameters): the clearing is a pure function of that input, so it would be identical.
        Quiet periods (no arrival, no bid change, no move) are common in long simulations."""
        last = self._last_clearing
        if (
            last is not None
            and last[0] is self.hosts
            and last[1] is self.balance
            and np.array_equal(last[2], self._reserve)
            and _same_input(last[3], vms)
        ):
            return last[4]
        result = clear(self.hosts, vms, reserve_price=self._reserve, params=self.balance)
        self._last_clearing = (self.hosts, self.balance, self._reserve.copy(), vms, result)
        return result

    # --- step 4: the plan -------------------------------------------------------------

    def _plan(
        self, now: float, runs: Sequence[tuple[App, list[VMRecord]]], result: Any, ops: _Ops
    ) -> Plan:
        create: list[VMPlacement] = []
        resume: list[VMPlacement] = []
        migrate: list[tuple[str, int, int]] = []
        allocations: dict[str, dict[str, float]] = {}
        hosts: list[int] = result.host.tolist()
        cols: list[list[float]] = result.allocation.T.tolist()  # one list per resource
        starting = (VMState.BOOTING, VMState.RESUMING, VMState.MIGRATING)
        running = VMState.RUNNING
        i = 0
        for app, vms in runs:
            const = app.const or self._const(app)
            columns, zero = const.columns, const.zero
            one = len(columns) == 1 and columns[0][1] >= 0  # one resource (CPU-only markets)
            r0, c0 = (columns[0][0], cols[columns[0][1]]) if one else ("", [])
            for vm in vms:
                h = hosts[i]
                if h == NO_HOST:  # nowhere to go this period: stays queued, gets nothing
                    if vm.alloc != zero:
                        vm.alloc = zero
                    i += 1
                    continue
                if vm.new:
                    (resume if vm.state is VMState.RESUMING else create).append(
                        VMPlacement(vm.id, vm.app, h)
                    )
                    vm.new = False
                elif h != vm.host:
                    migrate.append((vm.id, vm.host, h))
                vm.host = h
                old = vm.alloc  # kept when equal (the controller's view of it stays valid)
                if one:
                    a0 = c0[i]
                    if len(old) != 1 or old.get(r0) != a0:
                        vm.alloc = {r0: a0}
                else:
                    alloc = {r: cols[k][i] if k >= 0 else 0.0 for r, k in columns}
                    if alloc != old:
                        vm.alloc = alloc
                if vm.state in starting:
                    vm.state = running  # the backend models the delay; next period it runs
                allocations[vm.id] = vm.alloc
                i += 1
        return Plan(
            time=now,
            period=self.period,
            destroy=tuple(ops.destroy),
            suspend=tuple(ops.suspend),
            create=tuple(create),
            resume=tuple(resume),
            migrate=tuple(migrate),
            allocations=allocations,
        )

    # --- step 5: charging ------------------------------------------------------------

    def _charge(self, runs: Sequence[tuple[App, list[VMRecord]]]) -> int:
        """Every placed VM pays its bid (in micro-credits, rounded per VM) in one transaction."""
        per_app: dict[str, int] = {}
        for app, vms in runs:
            last: dict[str, float] | None = None
            x = 0
            run = 0
            for vm in vms:
                if vm.host != NO_HOST:
                    if vm.bid is not last:
                        last = vm.bid
                        x = to_micro(sum(last.values()))
                    run += x
            if last is not None:
                per_app[app.spec.id] = per_app.get(app.spec.id, 0) + run
        names = sorted(per_app)
        bills = [(self.apps[a].account, per_app[a]) for a in names]
        if not bills:
            return 0
        result = self.charger.apply(self.ledger, self.index, bills)
        for k in result.paid:
            self.apps[names[k]].spent += bills[k][1]
        return result.total


def _same_input(a: VMs, b: VMs) -> bool:
    """Whether two market inputs are the same arrays (VM ids only name VMs in errors)."""
    return (
        len(a) == len(b)
        and np.array_equal(a.host, b.host)
        and np.array_equal(a.bid, b.bid)
        and np.array_equal(a.cap, b.cap)
        and np.array_equal(a.minimum, b.minimum)
    )


@dataclass(frozen=True)
class _AppConst:
    """An application's constant observation parts (restricted to the resources it trades)
    and its VMs' constant market rows (cap and minimum per resource, in market order)."""

    vm_size: dict[str, float]
    capacity: dict[str, float]
    bid_min: dict[str, float]
    cap_row: list[float]
    min_row: list[float]
    columns: tuple[tuple[str, int], ...]  # (traded resource, its market column or -1)
    zero: dict[str, float]  # no allocation (never mutated)
    history: bool  # the controller reads past prices (Controller.reads_price_history)


@dataclass
class _Ops:
    """Operations decided while reconciling, before the market runs."""

    destroy: list[str] = field(default_factory=list)
    suspend: list[str] = field(default_factory=list)
