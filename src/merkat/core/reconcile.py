"""The per-application half of a decision (a period's, :mod:`merkat.core.period`, or an
admission's, :mod:`merkat.core.admission`): what each controller sees, and its demand
turned into the application's next state (:class:`~merkat.core.model.AppNext`).

:class:`Decider` holds what every decision of one platform reads and never changes (the
hosts' capacity, the period, the reserve price, ``keep_alive``) and two caches that are not
part of the domain, invalidated by identity: per application its constant observation parts
(``App.const``) and, per traded-resource tuple, the shared price views. It never writes a
record: the records change only in the commit (:mod:`merkat.core.commit`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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
from merkat.core.bids import set_bids, set_uniform, within_budget
from merkat.core.draft import add_vm, keep, own
from merkat.core.lifecycle import VM_TRANSITIONS, app_transition, vm_transition
from merkat.core.model import App, AppConst, AppNext, AppSpec, Observed, Ops, to_micro
from merkat.defaults import MICRO
from merkat.market import NO_HOST, RESOURCES

Prices = dict[str, float]


class Shared:
    """The prices of a period restricted to one traded-resource tuple, shared by the
    observations: ``source`` the prices it was built from, ``prices`` the view, ``past`` the
    past prices' views (None until an observation first reads them: :meth:`Decider._past`)."""

    __slots__ = ("past", "prices", "source")

    def __init__(self, source: Prices, prices: Prices) -> None:
        self.source = source
        self.prices = prices
        self.past: tuple[Prices, ...] | None = None


class Decider:
    """A platform's rules for its applications' decisions; see the module docstring.
    ``capacity``: the cluster's total per resource; ``reserve``: the minimum bid per VM and
    resource; ``keep_alive``: how many periods an application may fail to afford the reserve
    price of its VMs before it is stopped (``stopped-budget``, Merkat §4.2.4 iii)."""

    def __init__(self, period: float, capacity: Mapping[str, float],
                 reserve: Mapping[str, float], keep_alive: int) -> None:
        self.period = period
        self.capacity = capacity
        self.reserve = reserve
        self.reserve_row = np.array([reserve.get(r, 0.0) for r in RESOURCES])
        self.keep_alive = keep_alive
        # Per traded-resource tuple: its view of the last prices.
        self._shared: dict[tuple[str, ...], Shared] = {}
        # Per traded resource: its period's values for the batched SLO rows
        # (merkat.core.batch_slo.Tick, made there: that module imports this one)
        self.ticks: dict[str, Any] = {}

    # --- what a controller sees --------------------------------------------------------

    def const(self, app: App) -> AppConst:
        """What never changes in ``app``'s observations and market rows (built on first use
        and kept on the record as a cache: ``App.const``)."""
        if app.const is not None:
            return app.const
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

    def observe(self, app: App, now: float, balance: int, seen: Observed, prices: Prices,
                history: Sequence[Prices]) -> Observation:
        """What ``app``'s controller sees at ``now``: the last ``prices`` and the past ones
        (``history``, the last entry being ``prices``)."""
        spec = app.spec
        trade = spec.trade
        const = app.const or self.const(app)
        shared = self._shared.get(trade)
        if shared is None or shared.source is not prices:
            shared = self._shared_view(trade, prices, history)
        views: tuple[VMInfo, ...] = tuple(app.records())  # the records are the views (VMInfo)
        idle = seen.idle if app.status is AppStatus.RUNNING else frozenset()
        if idle:  # idle workers, released first by horizontal policies (VMInfo.busy)
            views = tuple(new_vm_view(id=v.id, state=v.state, alloc=v.alloc, bid=v.bid,
                                      busy=False) if v.id in idle else v for v in views)
        return new_observation_unchecked(  # its parts are checked once (submit, prices)
            time=now,
            period=self.period,
            prices=shared.prices,
            capacity=const.capacity,
            vm_size=const.vm_size,
            budget=new_budget(balance=balance / MICRO, renewal=const.renewal),
            bid_min=const.bid_min,
            vms=views,
            metrics=seen.metrics,
            price_history=(shared.past if shared.past is not None
                           else self._past(shared, trade, history)) if const.history else (),
            deadline=spec.deadline,
            submit_time=spec.submit_time,
            size=spec.size,
            nvms_max=spec.nvms_max,
        )

    def prices_for(self, trade: tuple[str, ...], prices: Prices,
                   history: Sequence[Prices]) -> Prices:
        """``prices`` restricted to ``trade``: the mapping the observations of this period
        share (checked once)."""
        shared = self._shared.get(trade)
        if shared is None or shared.source is not prices:
            shared = self._shared_view(trade, prices, history)
        return shared.prices

    def _shared_view(self, trade: tuple[str, ...], prices: Prices,
                     history: Sequence[Prices]) -> Shared:
        """``prices`` restricted to ``trade``, built once per period and shared by the
        observations (which never mutate them); the past prices' views are made by
        :meth:`_past` when an observation first reads them (most controllers, and the
        batches, read none)."""
        mine = {r: prices[r] for r in trade}
        check_amounts("prices", mine)
        shared = Shared(prices, mine)
        self._shared[trade] = shared
        return shared

    @staticmethod
    def _past(shared: Shared, trade: tuple[str, ...],
              history: Sequence[Prices]) -> tuple[Prices, ...]:
        """The past prices of ``history`` (the last entry being the current prices) restricted
        to ``trade``, made once per period and kept in ``trade``'s ``shared`` view."""
        past = shared.past = tuple({r: p[r] for r in trade} for p in history[:-1])
        return past

    def forget_prices(self) -> None:
        """Drop the shared price views (new prices: rebuilt on first use)."""
        self._shared.clear()

    # --- the demand into the next state ------------------------------------------------

    def broke_since(self, app: App, balance: int, now: float) -> tuple[float | None, bool]:
        """Since when ``app`` cannot pay the reserve price of its VMs (None: it can), and
        whether that has lasted ``keep_alive`` periods."""
        const = app.const or self.const(app)
        need = const.reserve_cost * max(len(app.columns[0]), app.spec.size)
        if balance >= need:
            return None, False
        since = now if app.broke_since is None else app.broke_since
        return since, now - since >= self.keep_alive * self.period - 1e-9

    def reconcile(self, app: App, nx: AppNext, demand: Demand, now: float, balance: int,
                  seen: Observed, ops: Ops, refused: list[str]) -> None:
        """Turn ``app``'s demand into its next state ``nx`` (made from its record); the bids
        of the period never exceed the balance."""
        action = demand.action
        if action is not Action.NONE:
            to = app_transition(nx.status, action)
            if not isinstance(to, AppStatus):  # refused: recorded, never re-applied
                refused.append(f"{nx.id}: {to}")
                action = Action.NONE
        if action is Action.NONE and nx.status is not AppStatus.RUNNING:
            return  # waiting or suspended, and staying so: no VM bids, nothing changes
        if action is Action.STOP:
            end(nx, now, demand.reason, seen.finished, ops)
            return
        if action is Action.SUSPEND or action is Action.RESUME:
            own(nx)  # (states, hosts and fresh written in place: copy on write)
        states = nx.states
        if action is Action.SUSPEND:
            if _allowed(states, _SUSPENDED, _INTO_SUSPENDED):
                ids = nx.ids
                for k, state in enumerate(states):
                    if state is not _SUSPENDED:
                        states[k] = _SUSPENDED
                        ops.suspend.append(ids[k])
            else:  # (the table's refusal, raised where the per-VM check raises it)
                for k, state in enumerate(states):
                    if state is not VMState.SUSPENDED:
                        states[k] = vm_transition(state, VMState.SUSPENDED)
                        ops.suspend.append(nx.ids[k])
            nx.status = AppStatus.SUSPENDED
            nx.suspensions += 1
            nx.moved = True
            return
        if action is Action.START:
            for _ in range(max(demand.nvms, 1)):
                add_vm(nx, dict(demand.new_vm_bid))
            nx.status = AppStatus.RUNNING
            if nx.start_time is None:
                nx.start_time = now
        elif action is Action.RESUME:
            if _allowed(states, _RESUMING, _INTO_RESUMING):
                n = len(states)  # (own(nx) above: the next state's own lists, in place)
                states[:] = [_RESUMING] * n
                nx.hosts[:] = [NO_HOST] * n
                nx.fresh[:] = [True] * n
            else:  # (the table's refusal, raised where the per-VM check raises it)
                for k, state in enumerate(states):
                    states[k] = vm_transition(state, VMState.RESUMING)
                    nx.hosts[k] = NO_HOST
                    nx.fresh[k] = True
            nx.status = AppStatus.RUNNING
            nx.resumes += 1
            nx.moved = True
        if nx.status is not AppStatus.RUNNING:
            return  # waiting or suspended: no VM bids
        # Horizontal scaling: release the named VMs (or the newest) or add VMs.
        n = len(nx.ids)
        if demand.nvms < n and action is Action.NONE:
            drop = set(demand.release) or set(nx.ids[demand.nvms :])
            ops.destroy.extend(i for i in nx.ids if i in drop)
            keep(nx, [k for k, i in enumerate(nx.ids) if i not in drop])
        elif demand.nvms > n and action is Action.NONE:
            for _ in range(demand.nvms - n):
                add_vm(nx, dict(demand.new_vm_bid))
        set_bids(nx, app.spec.trade, demand)
        within_budget(nx, balance, self.reserve, app.controller.name)

    def rebid(self, app: App, nx: AppNext, bid: dict[str, float], balance: int) -> None:
        """A running application's demand that keeps its VMs, each bidding ``bid`` (over the
        resources it trades): :meth:`reconcile` of that demand (a batched policy's,
        :mod:`merkat.core.batch`)."""
        set_uniform(nx, bid)
        within_budget(nx, balance, self.reserve, app.controller.name)


_SUSPENDED, _RESUMING = VMState.SUSPENDED, VMState.RESUMING
_INTO_SUSPENDED = tuple(a for a, b in VM_TRANSITIONS if b is _SUSPENDED)
_INTO_RESUMING = tuple(a for a, b in VM_TRANSITIONS if b is _RESUMING)


def _allowed(states: list[VMState], to: VMState, into: tuple[VMState, ...]) -> bool:
    """Whether the lifecycle table lets every VM of ``states`` go to ``to`` (``into``: the
    states it allows that from; a VM already there stays): then each
    :func:`~merkat.core.lifecycle.vm_transition` would answer ``to``. What it replaces, for
    a suspension or a resumption of every VM (themis-fig5: 50,851 suspends and 42,416
    resumes in its 0.2 run): one ``vm_transition`` call per VM, each hashing two enum
    members in Python (``Enum.__hash__``) for the table's set; here a tuple's identity
    scan in C. ``tests/test_one_visit.py`` checks both ways on every state pair."""
    for state in states:  # noqa: SIM110  (a loop: no generator's frame)
        if state is not to and state not in into:
            return False
    return True


def end(nx: AppNext, now: float, reason: str, finished: bool, ops: Ops,
        outcome: str = "") -> None:
    """End the application of ``nx``: release its VMs; ``finished`` when its work is done."""
    ops.destroy.extend(nx.ids)
    keep(nx, ())
    nx.status = AppStatus.FINISHED if finished else AppStatus.STOPPED
    nx.end_time = now if nx.end_time is None else nx.end_time
    nx.reason = reason
    nx.outcome = "finished" if finished else (outcome or "stopped")


def _cap(spec: AppSpec) -> float:
    """An application's budget cap (default: its initial budget)."""
    return spec.budget if spec.budget_cap is None else spec.budget_cap
