"""One scheduling period, the heart of merkat (docs/architecture.md, "One scheduling period").

The period is a **decision**; the runtime driver (:mod:`merkat.runtime.driver`) is its only
caller and does every effect. Per period the driver renews the budgets (the economy), reads
the balances and each active application's :class:`Observed` (metrics, idle VMs, finished)
from the ledger and the backend, then:

1. :meth:`Platform.decide` — each controller turns an
   :class:`~merkat.control.types.Observation` into a :class:`~merkat.control.types.Demand`;
   the lifecycle table (:mod:`merkat.platform.lifecycle`) refuses actions not allowed in the
   application's status; the demand becomes VM records, bids kept within the balance; an
   application that could not pay the reserve price for its VMs for ``keep_alive`` periods is
   stopped (``stopped-budget``); :func:`merkat.market.clear` over every VM that bids gives
   prices, placements, migrations and allocations; out comes a :class:`Decision` (the
   backend :class:`~merkat.platform.backend.Plan`, the bills, the usage, the refusals);
2. the driver charges the bills (the economy's charging plugin); :meth:`Platform.withhold`
   takes the VMs of applications that could not pay out of the plan (suspended, or back to
   waiting: nothing runs for free);
3. the driver hands the plan to the backend, which reports each operation;
4. :meth:`Platform.commit` takes VM states from the report (a failed boot or migration is
   undone and retried next period, a failed destroy or suspend is re-issued) and returns the
   :class:`PeriodRecord`.

No clock is read and no ledger or backend is called here.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
from mypy_extensions import mypyc_attr

from merkat.control.base import Controller
from merkat.control.forecast import HISTORY
from merkat.control.registry import make_policy
from merkat.control.types import (
    Action,
    AppStatus,
    Demand,
    Observation,
    VMInfo,
    VMState,
    check_amounts,
    new_budget,
    new_observation_unchecked,
    new_vm_view,
)
from merkat.market import NO_HOST, RESOURCES, BalanceParams, Clearing, Hosts, VMs
from merkat.market.mechanisms import make_mechanism
from merkat.platform.backend import ApplyReport
from merkat.platform.bids import set_bids, within_budget
from merkat.platform.lifecycle import ENDED, app_failure, app_transition, vm_transition
from merkat.platform.market_input import bidding as bidding_vms
from merkat.platform.market_input import market_vms, same_input
from merkat.platform.model import (
    MICRO,
    App,
    AppConst,
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
from merkat.platform.plan import bills_of, make_plan

__all__ = ["ENDED", "MICRO", "App", "AppSpec", "AppStatus", "Charged", "Decision", "NonFiniteBid",
           "Observed", "PeriodRecord", "Platform", "VMRecord", "to_micro"]


@mypyc_attr(allow_interpreted_subclasses=True)
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
    period: float = 300.0
    reserve: Mapping[str, float] = field(default_factory=lambda: {r: 0.001 for r in RESOURCES})
    balance: BalanceParams = field(default_factory=BalanceParams)
    provider: str = "provider"
    keep_alive: int = 3
    history_size: int = HISTORY  # past prices shown: the forecasts' default window
    market: str = "proportional-share"  # the mechanism (merkat.market.mechanisms), by name
    apps: dict[str, App] = field(default_factory=dict)
    active: dict[str, App] = field(default_factory=dict)
    records: list[PeriodRecord] = field(default_factory=list)
    index: int = 0
    # applications submitted since the last period (ids): the admission queue
    queue: list[str] = field(default_factory=list)

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
        self._reserve = np.array([self.reserve.get(r, 0.0) for r in RESOURCES])
        self._last_clearing: tuple[Hosts, BalanceParams, np.ndarray, VMs, Clearing] | None = None
        self._mechanism = make_mechanism(self.market)
        # Per traded-resource tuple: (prices it was built from, prices, past prices).
        self._shared: dict[
            tuple[str, ...],
            tuple[dict[str, float], dict[str, float], tuple[dict[str, float], ...]],
        ] = {}
        self._retry = Ops()  # destroy/suspend operations the backend failed: re-issued

    # --- submission -------------------------------------------------------------------

    def submit(self, spec: AppSpec, controller: Controller | None = None,
               account: str | None = None) -> App:
        """Admit an application: its record and its controller (its account, named
        ``account``, default ``app:ID``, is opened and funded by the driver's economy)."""
        if spec.id in self.apps:
            raise ValueError(f"application {spec.id!r} already exists")
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
        self.queue.append(spec.id)
        return app

    @property
    def admits_between(self) -> bool:
        """Whether applications can start between periods (a stateless mechanism; see
        :mod:`merkat.platform.admission`)."""
        return self._mechanism.stateless

    def queued(self) -> list[App]:
        """The applications in the admission queue still waiting for their first start."""
        apps = self.apps
        return [apps[a] for a in self.queue
                if apps[a].status is AppStatus.WAITING and apps[a].active]

    def admit(self, now: float, until: float, balances: Mapping[str, int],
              observed: Mapping[str, Observed]) -> Decision:
        """An admission point between periods: :func:`merkat.platform.admission.admit`."""
        from merkat.platform.admission import admit

        return admit(self, now, until, balances, observed)

    # --- the decision -----------------------------------------------------------------

    def decide(
        self, now: float, balances: Mapping[str, int], observed: Mapping[str, Observed]
    ) -> Decision:
        """The period at time ``now``: ``balances`` of the active applications' accounts (after
        this period's renewal), ``observed`` per active application id. Changes only this
        platform's own records (VMs, statuses, prices); see the module docstring."""
        ops = Ops(list(self._retry.destroy), list(self._retry.suspend))
        self._retry = Ops()
        self.queue.clear()
        refused: list[str] = []
        for app in list(self.active.values()):
            balance = balances[app.account]
            seen = observed[app.spec.id]
            if self._broke(app, balance, now):
                self._end(app, now, "could not pay the reserve price for "
                          f"{self.keep_alive} periods", seen.finished, ops, "stopped-budget")
            else:
                obs = self.observe(app, now, balance, seen)
                demand = app.controller.decide(obs)
                self._reconcile(app, demand, now, balance, seen, ops, refused)
            if not app.active:
                del self.active[app.spec.id]

        runs = bidding_vms(self.active.values())
        bidding = sum(len(vms) for _, vms in runs)
        vms = market_vms(runs, bidding, self._const)
        result = self._clear(vms)
        self.prices = {r: float(result.price[k]) for k, r in enumerate(RESOURCES)}
        self.price_history.append(self.prices)
        del self.price_history[: -self.history_size]
        self._shared.clear()

        starting: list[VMRecord] = []
        moved: list[tuple[VMRecord, int]] = []
        plan = make_plan(now, self.period, runs, result, ops, starting, moved, self._const,
                         vms.host)
        bills, usage = bills_of(runs, result.host, vms.host, result.allocation, vms.bid,
                                self.prices)
        alloc = result.allocation.sum(axis=0) if bidding else np.zeros(len(RESOURCES))
        return Decision(
            index=self.index, time=now, plan=plan, bills=bills, usage=usage,
            refused=tuple(refused), prices=dict(self.prices),
            allocated={r: float(alloc[k]) for k, r in enumerate(RESOURCES)}, bidding=bidding,
            starting=starting, moved=moved,
        )

    def _broke(self, app: App, balance: int, now: float) -> bool:
        """Whether ``app`` has been unable to pay the reserve price of its VMs for
        ``keep_alive`` periods (counted from the first period it could not)."""
        const = app.const or self._const(app)
        need = const.reserve_cost * max(len(app.vms), app.spec.size)
        if balance >= need:
            app.broke_since = None
            return False
        if app.broke_since is None:
            app.broke_since = now
        return now - app.broke_since >= self.keep_alive * self.period - 1e-9

    def _end(self, app: App, now: float, reason: str, finished: bool, ops: Ops,
             outcome: str = "") -> None:
        """End ``app``: release its VMs; ``finished`` when its work is done."""
        ops.destroy.extend(vm.id for vm in app.vms)
        app.vms = []
        app.status = AppStatus.FINISHED if finished else AppStatus.STOPPED
        app.end_time = now if app.end_time is None else app.end_time
        app.reason = reason
        app.outcome = "finished" if finished else (outcome or "stopped")

    def stop(self, app_id: str, now: float, reason: str, failed: bool = False
             ) -> tuple[str, ...]:
        """End application ``app_id`` now, through the lifecycle table (its owner's STOP, or
        with ``failed`` a failure of the world: ``app_failure``; ``ValueError`` when refused)
        and the end rule of a period's STOP; returns its VMs, for the driver to destroy."""
        app = self.apps[app_id]
        nxt = app_failure(app.status) if failed else app_transition(app.status, Action.STOP)
        if not isinstance(nxt, AppStatus):
            raise ValueError(f"application {app_id!r}: {nxt}")
        ops = Ops()
        self._end(app, now, reason, False, ops, "failed" if failed else "")
        app.status = nxt  # (STOPPED, or FAILED: the table's answer)
        self.active.pop(app_id, None)
        if app_id in self.queue:
            self.queue.remove(app_id)
        return tuple(ops.destroy)

    def reissue(self, report: ApplyReport) -> None:
        """The destroys and suspends ``report`` says failed are re-issued by the next
        period (a plan applied outside a period: an end, an admission)."""
        for o in report.failed:
            if o.op == "destroy":
                self._retry.destroy.append(o.vm)
            elif o.op == "suspend":
                self._retry.suspend.append(o.vm)

    def withhold(self, decision: Decision, unpaid: Collection[str]) -> Decision:
        """``decision`` without the VMs of the ``unpaid`` applications (ids): an application
        that had VMs running has them suspended; one whose VMs were only starting goes back to
        waiting (its start did not happen). Nothing runs for free."""
        if not unpaid:
            return decision
        plan = decision.plan
        gone: set[str] = set()
        suspend: list[str] = []
        starting_ids = {vm.id for vm in decision.starting}
        for app_id in sorted(unpaid):
            app = self.apps[app_id]
            for vm in app.vms:
                gone.add(vm.id)
            was_running = [vm for vm in app.vms if vm.id not in starting_ids
                           and vm.state is not VMState.SUSPENDED and vm.host != NO_HOST]
            if was_running:
                for vm in was_running:
                    vm.state = vm_transition(vm.state, VMState.SUSPENDED)
                    vm.alloc = {}
                    suspend.append(vm.id)
                app.vms = [vm for vm in app.vms if vm.state is VMState.SUSPENDED]
                for vm in app.vms:
                    vm.host = NO_HOST
                app.status = AppStatus.SUSPENDED
                app.suspensions += 1
            else:
                resumed = [vm for vm in app.vms if vm.state is VMState.RESUMING]
                for vm in resumed:  # back to suspended: the resume did not happen
                    vm.state = VMState.SUSPENDED
                    vm.host = NO_HOST
                    vm.new = True
                app.vms = resumed
                app.status = AppStatus.SUSPENDED if resumed else AppStatus.WAITING
                if not resumed and app.start_time == decision.time:
                    app.start_time = None
        starting = [vm for vm in decision.starting if vm.id not in gone]
        moved = [(vm, h) for vm, h in decision.moved if vm.id not in gone]
        new_plan = replace(
            plan,
            suspend=plan.suspend + tuple(suspend),
            create=tuple(p for p in plan.create if p.vm not in gone),
            resume=tuple(p for p in plan.resume if p.vm not in gone),
            migrate=tuple(m for m in plan.migrate if m[0] not in gone),
            allocations={v: a for v, a in plan.allocations.items() if v not in gone},
        )
        return replace(
            decision, plan=new_plan, starting=starting, moved=moved,
            bills=tuple(b for b in decision.bills if b[0] not in unpaid),
            usage=tuple(u for u in decision.usage if u[0] not in unpaid),
        )

    def commit(self, decision: Decision, report: ApplyReport, charged: Charged) -> PeriodRecord:
        """Take the backend's ``report`` of ``decision``'s plan and the economy's ``charged``
        into the platform's state; return (and keep) the period's record."""
        failures = self.settle(decision, report, charged)
        statuses = [a.status for a in self.active.values()]
        plan = decision.plan
        record = PeriodRecord(
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
        """Take the backend's ``report`` and the economy's ``charged`` into the VM and
        application records (a period's, or an admission's: :mod:`merkat.platform.admission`);
        return the failed operations, one line each."""
        failed = {(o.op, o.vm): o.reason for o in report.ops if not o.ok}
        failures: list[str] = []
        if failed:
            for op, vm_id in sorted(failed):
                failures.append(f"{op} {vm_id}: {failed[op, vm_id]}")
            for vm_id in decision.plan.destroy:
                if ("destroy", vm_id) in failed:
                    self._retry.destroy.append(vm_id)
            for vm_id in decision.plan.suspend:
                if ("suspend", vm_id) in failed:
                    self._retry.suspend.append(vm_id)
            for vm, src in decision.moved:
                if ("migrate", vm.id) in failed:
                    vm.host = src  # it did not move
        running = VMState.RUNNING
        for vm in decision.starting:
            op = "resume" if vm.state is VMState.RESUMING else "create"
            if failed and (op, vm.id) in failed:  # not started: placed again next period
                vm.host = NO_HOST
                vm.new = True
                vm.alloc = {}
                continue
            vm.state = vm_transition(vm.state, running)  # booting/resuming take time in the world
        for app_id, amount in charged.paid.items():
            self.apps[app_id].spent += amount
        return failures

    # --- step 1: observation and reconciliation ---------------------------------------

    def observe(self, app: App, now: float, balance: int, seen: Observed) -> Observation:
        """What ``app``'s controller sees this period."""
        spec = app.spec
        trade = spec.trade
        const = app.const or self._const(app)
        shared = self._shared.get(trade)
        if shared is None or shared[0] is not self.prices:
            shared = self._shared_view(trade)
        views: tuple[VMInfo, ...] = tuple(app.vms)  # the records are the views (VMInfo)
        idle = seen.idle if app.status is AppStatus.RUNNING else frozenset()
        if idle:  # idle workers, released first by horizontal policies (VMInfo.busy)
            views = tuple(new_vm_view(id=v.id, state=v.state, alloc=v.alloc, bid=v.bid,
                                      busy=False) if v.id in idle else v for v in views)
        return new_observation_unchecked(  # its parts are checked once (submit, prices)
            time=now,
            period=self.period,
            prices=shared[1],
            capacity=const.capacity,
            vm_size=const.vm_size,
            budget=new_budget(balance=balance / MICRO, renewal=const.renewal),
            bid_min=const.bid_min,
            vms=views,
            metrics=seen.metrics,
            price_history=shared[2] if const.history else (),
            deadline=spec.deadline,
            submit_time=spec.submit_time,
            size=spec.size,
            nvms_max=spec.nvms_max,
        )

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

    def _const(self, app: App) -> AppConst:
        """What never changes in ``app``'s observations and market rows (built on first use)."""
        spec = app.spec
        trade = spec.trade
        const = AppConst(
            vm_size={r: spec.vm_size[r] for r in trade},
            capacity={r: self.capacity[r] for r in trade},
            bid_min={r: float(self.reserve.get(r, 0.0)) for r in trade},
            # a resource it does not trade is not in its market: no cap, so no bid expected
            # (a CPU-only template with a memory size; its memory still counts for placement)
            cap_row=[spec.vm_size.get(r, 0.0) if r in trade else 0.0 for r in RESOURCES],
            min_row=[spec.vm_min.get(r, 0.0) for r in RESOURCES],
            columns=tuple((r, RESOURCES.index(r) if r in RESOURCES else -1) for r in trade),
            zero=dict.fromkeys(trade, 0.0),
            history=app.controller.reads_price_history,
            # as the economy's allowance has it: in micro-credits, none without a cap
            renewal=(to_micro(spec.renewal) / MICRO
                     if to_micro(spec.renewal) > 0 and to_micro(_cap(spec)) > 0 else 0.0),
            reserve_cost=to_micro(sum(float(self.reserve.get(r, 0.0)) for r in trade)),
        )
        check_amounts("capacity", const.capacity)
        check_amounts("vm_size", const.vm_size)
        check_amounts("bid_min", const.bid_min)
        app.const = const
        return const

    def _reconcile(self, app: App, demand: Demand, now: float, balance: int, seen: Observed,
                   ops: Ops, refused: list[str]) -> None:
        """Turn a demand into VM records; the bids of the period never exceed the balance."""
        action = demand.action
        if action is not Action.NONE:
            nxt = app_transition(app.status, action)
            if not isinstance(nxt, AppStatus):  # refused: recorded, never re-applied
                refused.append(f"{app.spec.id}: {nxt}")
                action = Action.NONE
        if action is Action.NONE and app.status is not AppStatus.RUNNING:
            return  # waiting or suspended, and staying so: no VM bids, nothing changes
        if action is Action.STOP:
            self._end(app, now, demand.reason, seen.finished, ops)
            return
        if action is Action.SUSPEND:
            for vm in app.vms:
                if vm.state is not VMState.SUSPENDED:
                    vm.state = vm_transition(vm.state, VMState.SUSPENDED)
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
                vm.state = vm_transition(vm.state, VMState.RESUMING)
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
        set_bids(app, demand)
        within_budget(app, balance, self.reserve)

    # --- step 3: the market's input ---------------------------------------------------

    def _clear(self, vms: VMs) -> Clearing:
        """The mechanism's clearing (:func:`merkat.market.clear` by default), or, for a stateless
        mechanism, the last period's clearing when its input was the same
        (the same bids, caps, minimums and hosts, on the same cluster with the same reserve and
        parameters): the clearing is a pure function of that input, so it would be identical.
        Quiet periods (no arrival, no bid change, no move) are common in long simulations."""
        last = self._last_clearing
        mechanism = self._mechanism
        if not mechanism.stateless:  # its state moves every period: never reuse a clearing
            return mechanism.clear(self.hosts, vms, reserve_price=self._reserve,
                                   params=self.balance)
        if (
            last is not None
            and last[0] is self.hosts
            and last[1] is self.balance
            and np.array_equal(last[2], self._reserve)
            and same_input(last[3], vms)
        ):
            return last[4]
        result = mechanism.clear(self.hosts, vms, reserve_price=self._reserve,
                                 params=self.balance)
        self._last_clearing = (self.hosts, self.balance, self._reserve.copy(), vms, result)
        return result

def _cap(spec: AppSpec) -> float:
    """An application's budget cap (default: its initial budget)."""
    return spec.budget if spec.budget_cap is None else spec.budget_cap
