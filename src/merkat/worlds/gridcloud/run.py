"""The grid-cloud simulator: users, the DIET hierarchy, providers and the Virtual Bank as
timestamped events (grid-cloud model §3, §4). Seeded: same config → same result, bit for bit.

Events (a heap of ``(time, seq, kind, payload)``; ``seq`` orders equal times by creation):

- a user's task arrives → REQUEST_FOR_OFFERS to the Master Agent (one hop later);
- the request goes down the hierarchy hop by hop; each SeD's TAM computes its OFFERS, which go
  up and are merged at each agent once all its children answered (:class:`~.diet.Gather`);
- the user filters the offers (deadline: now + A^TIME ≤ T; budget: A^COST ≤ balance − cost of
  its tasks in execution), picks the best by its utility and sends RUN_TASK to that SeD, which
  re-checks it (:meth:`~.provider.Provider.run_task`); a refusal comes back with the
  provider's fresh offers (used if the user keeps alternatives);
- a task ends at its PE at the end computed when it was queued; RUN_RESULT reaches the user one
  hop later, who pays the provider (a ledger transfer) and retries a stored task;
- every 50 s the providers adapt prices (eq. 5) and the figures are sampled; every 50 s VMs idle
  for more than 600 s are switched off; every 1,000 s the Virtual Bank gathers the providers'
  income and splits it equally among the users (:class:`~merkat.bank.policies.VirtualBank`);
  every 500 s each user retries its stored task of highest priority.

Money: each user's initial budget is minted once at t = 0 into a
:class:`~merkat.bank.memory.MemoryLedger`; afterwards money only moves (payments,
redistributions), so the audit must balance and the minted total stay the initial one.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.bank.policies import VirtualBank
from merkat.defaults import MICRO
from merkat.worlds.gridcloud import diet
from merkat.worlds.gridcloud.model import (
    BANK_PERIOD,
    CATALOG,
    CPU,
    IDLE_CHECK_PERIOD,
    IDLE_THRESHOLD,
    INITIAL_BUDGET,
    MESSAGE_DELAY,
    PRICE_PERIOD,
    RETRY_PERIOD,
    Offer,
    Task,
    cluster_of,
)
from merkat.worlds.gridcloud.provider import Provider
from merkat.worlds.gridcloud.users import (
    PRIORITIES,
    UTILITIES,
    Load,
    StoredTasks,
    Strategy,
    generate_tasks,
)

ARRIVE, DOWN, UP, OFFERS, RUN, REJECT, DONE, RESULT, TICK, RETRY = range(10)
SUCCEEDED, F_BUDGET, F_DEADLINE, F_OFFER = "succeeded", "failed_budget", "failed_deadline", (
    "failed_offer"
)
OUTCOMES = (SUCCEEDED, F_BUDGET, F_DEADLINE, F_OFFER)
MAX_ATTEMPTS = 50
"""RUN_TASK attempts on alternative offers per negotiation before the task is stored."""


@dataclass(frozen=True)
class Group:
    """``users`` users sharing a ``load`` (λ⁻¹ over time) and ``tasks`` tasks each."""

    users: int
    tasks: int
    load: Load = field(default_factory=Load)


@dataclass(frozen=True)
class Config:
    """One simulation. ``providers`` lists each provider's clusters (names of
    :data:`~.model.CLUSTERS`, or ``NAME*K``); ``fanout`` the DIET agent levels (see
    :func:`~.diet.build`)."""

    providers: tuple[tuple[str, ...], ...] = (("small",), ("small",))
    groups: tuple[Group, ...] = (Group(20, 500),)
    strategy: Strategy = field(default_factory=Strategy)
    seed: int = 0
    fanout: tuple[int, ...] = (1,)
    budget: float = INITIAL_BUDGET
    price_period: float = PRICE_PERIOD
    idle_period: float = IDLE_CHECK_PERIOD
    idle_threshold: float = IDLE_THRESHOLD
    bank_period: float = BANK_PERIOD
    retry_period: float = RETRY_PERIOD
    delay: float = MESSAGE_DELAY
    sample_period: float = PRICE_PERIOD

    def __post_init__(self) -> None:
        if not self.providers or any(not p for p in self.providers):
            raise ValueError("providers: at least one provider with at least one cluster")
        for p in self.providers:
            for c in p:
                cluster_of(c)
        if not self.groups or any(g.users < 1 or g.tasks < 0 for g in self.groups):
            raise ValueError("groups: at least one group of at least one user")
        for name in ("budget", "price_period", "idle_period", "bank_period", "retry_period",
                     "sample_period"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be a positive number, got {v!r}")
        if not (math.isfinite(self.delay) and self.delay >= 0):
            raise ValueError(f"delay must be >= 0, got {self.delay!r}")


@dataclass
class _User:
    name: str
    group: int
    tasks: list[Task]
    reserved: int = 0
    queue: StoredTasks = field(default_factory=StoredTasks)
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(OUTCOMES, 0))
    value: dict[str, float] = field(default_factory=lambda: {"succeeded": 0.0, "failed": 0.0})
    high: dict[str, int] = field(default_factory=lambda: {"succeeded": 0, "total": 0})


def _micro(cost: float) -> int:
    return math.ceil(cost * MICRO)


class Simulation:
    """One run of :class:`Config`; :meth:`run` returns the result dict (see :func:`simulate`)."""

    def __init__(self, cfg: Config, progress: Callable[[int, int], None] | None = None) -> None:
        self.cfg = cfg
        self.progress = progress
        self.providers = [
            Provider([cluster_of(c) for c in p], CATALOG) for p in cfg.providers
        ]
        self.tree = diet.build(len(self.providers), cfg.fanout)
        self.sed_node = {n.sed: n.id for n in self.tree.nodes if n.sed is not None}
        self.utility = UTILITIES[cfg.strategy.utility]
        self.priority = PRIORITIES[cfg.strategy.priority]
        self.users: list[_User] = []
        first = 0
        for g, grp in enumerate(cfg.groups):
            for _ in range(grp.users):
                k = len(self.users)
                tasks = generate_tasks(k, grp.tasks, grp.load, cfg.seed, first)
                first += grp.tasks
                self.users.append(_User(f"user-{k}", g, tasks))
        self.total = first
        self.resolved = 0
        self.ledger = MemoryLedger()
        self.bank = VirtualBank()
        for u in self.users:
            self.ledger.create_account(u.name, AccountKind.user)
            self.ledger.mint(u.name, _micro(cfg.budget), "initial budget")
        for k in range(len(self.providers)):
            self.ledger.create_account(f"provider-{k}", AccountKind.provider)
        self.minted = self.ledger.audit().minted
        self.events: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.reason: dict[int, str] = {}  # task id -> why it was last stored
        self.alts: dict[int, list[Offer]] = {}
        self.attempts: dict[int, int] = {}
        self.reserved: dict[int, int] = {}  # task id -> micro-credits reserved
        self.placed: dict[int, tuple[int, float, int]] = {}  # task -> (provider, end, cost)
        self.gathers: dict[tuple[int, int], diet.Gather] = {}
        self.series: dict[str, list[Any]] = {"t": [], "allocated_pes": [], "running_pes": [],
                                             "queued_tasks": [], "cpu_price": [],
                                             "run": [], "failed": []}
        self.group_run = [0] * len(cfg.groups)
        self.group_failed = [0] * len(cfg.groups)
        self.redistributions = 0
        self.vms_started = 0
        self.vms_stopped = 0
        self.requests = 0
        self.peak_vms = 0
        self.due_idle = 0.0
        self.due_bank = cfg.bank_period
        self.due_sample = 0.0

    # --- events ---------------------------------------------------------------------------

    def push(self, t: float, kind: int, payload: Any) -> None:
        heapq.heappush(self.events, (t, self.seq, kind, payload))
        self.seq += 1

    def run(self) -> dict[str, Any]:
        cfg = self.cfg
        for u, user in enumerate(self.users):
            if user.tasks:
                self.push(user.tasks[0].created, ARRIVE, (u, 0))
            self.push(cfg.retry_period, RETRY, u)
        self.push(0.0, TICK, 0)
        last_report = 0
        now = 0.0
        events = self.events
        while events and self.resolved < self.total:
            now, _, kind, p = heapq.heappop(events)
            if kind == DOWN:
                self.on_down(now, *p)
            elif kind == UP:
                self.on_up(now, *p)
            elif kind == OFFERS:
                self.on_offers(now, *p)
            elif kind == ARRIVE:
                self.on_arrive(now, *p)
            elif kind == RUN:
                self.on_run(now, *p)
            elif kind == DONE:
                prov, vm, pe, task = p
                self.providers[prov].complete(vm, pe)
                self.push(now + cfg.delay, RESULT, task)
            elif kind == RESULT:
                self.on_result(now, p)
            elif kind == REJECT:
                self.on_reject(now, *p)
            elif kind == RETRY:
                self.retry(now, self.users[p])
                self.push(now + cfg.retry_period, RETRY, p)
            elif kind == TICK:
                self.on_tick(now, p)
            if self.progress is not None and self.resolved - last_report >= 2000:
                self.progress(self.resolved, self.total)
                last_report = self.resolved
        self.sample(now)
        return self.result(now)

    def on_tick(self, now: float, k: int) -> None:
        """Tick ``k`` (every price period): eq. 5 from the second tick on; the idle check,
        the Virtual Bank and the sample at the first tick at or after each of their periods."""
        cfg = self.cfg
        if k > 0:
            for prov in self.providers:
                prov.adapt_prices()
        if now >= self.due_idle:
            for prov in self.providers:
                self.vms_stopped += len(prov.stop_idle(now, cfg.idle_threshold))
            self.due_idle += cfg.idle_period * (math.floor((now - self.due_idle) / cfg.idle_period) + 1)
        if now >= self.due_bank:
            self.redistributions += 1
            self.bank.apply(self.ledger, period=self.redistributions)
            self.due_bank += cfg.bank_period * (math.floor((now - self.due_bank) / cfg.bank_period) + 1)
        if now >= self.due_sample:
            self.sample(now)
            self.due_sample += cfg.sample_period * (
                math.floor((now - self.due_sample) / cfg.sample_period) + 1)
        self.push(now + cfg.price_period, TICK, k + 1)

    def sample(self, now: float) -> None:
        s = self.series
        alloc = run = queued = 0
        for prov in self.providers:
            a, r, q = prov.pe_counts(now)
            alloc, run, queued = alloc + a, run + r, queued + q
        self.peak_vms = max(self.peak_vms, sum(len(p.vms) for p in self.providers))
        s["t"].append(round(now, 3))
        s["allocated_pes"].append(alloc)
        s["running_pes"].append(run)
        s["queued_tasks"].append(queued)
        s["cpu_price"].append([p.prices.prices[CPU] for p in self.providers])
        s["run"].append(list(self.group_run))
        s["failed"].append(list(self.group_failed))

    # --- users ----------------------------------------------------------------------------

    def on_arrive(self, now: float, u: int, k: int) -> None:
        user = self.users[u]
        task = user.tasks[k]
        if k + 1 < len(user.tasks):
            self.push(user.tasks[k + 1].created, ARRIVE, (u, k + 1))
        self.request(now, task)

    def request(self, now: float, task: Task) -> None:
        """REQUEST_FOR_OFFERS for ``task`` to the Master Agent."""
        self.requests += 1
        self.push(now + self.cfg.delay, DOWN, (self.tree.root, task))

    def on_offers(self, now: float, task: Task, offers: list[Offer]) -> None:
        self.attempts[task.id] = 0
        if self.cfg.strategy.alternatives:
            self.alts[task.id] = list(offers)
        self.choose(now, task, offers)

    def _suitable(self, now: float, user: _User, task: Task, offers: list[Offer]) -> list[Offer]:
        avail = self.ledger.balance(user.name) - user.reserved
        limit = task.deadline - now
        return [o for o in offers if o.time <= limit and o.cost * MICRO <= avail]

    def choose(self, now: float, task: Task, offers: list[Offer]) -> None:
        """Pick the best suitable offer and send RUN_TASK, or store/fail the task."""
        user = self.users[task.user]
        ok = self._suitable(now, user, task, offers)
        if not ok:
            fits_time = any(now + o.time <= task.deadline for o in offers)
            self.store(now, task, F_BUDGET if fits_time else F_DEADLINE)
            return
        utility = self.utility
        best = ok[0]
        best_u = utility(best.cost, best.time)
        for o in ok:
            u = utility(o.cost, o.time)
            if u > best_u:  # first on ties
                best, best_u = o, u
        if task.id in self.alts:
            self.alts[task.id] = [o for o in self.alts[task.id] if o is not best]
        amount = _micro(best.cost)
        user.reserved += amount
        self.reserved[task.id] = amount
        self.attempts[task.id] = self.attempts.get(task.id, 0) + 1
        self.push(now + self.cfg.delay, RUN, (best.sed, task, best))

    def store(self, now: float, task: Task, why: str) -> None:
        self.alts.pop(task.id, None)
        if self.cfg.strategy.retry and task.deadline > now:
            self.reason[task.id] = why
            self.users[task.user].queue.append(task)
        else:
            self.finish(task, why)

    def finish(self, task: Task, outcome: str) -> None:
        user = self.users[task.user]
        user.counts[outcome] += 1
        if outcome == SUCCEEDED:
            user.value["succeeded"] += task.importance
            self.group_run[user.group] += 1
        else:
            user.value["failed"] += task.importance
            self.group_failed[user.group] += 1
        if task.high:
            user.high["total"] += 1
            user.high["succeeded"] += outcome == SUCCEEDED
        self.reason.pop(task.id, None)
        self.alts.pop(task.id, None)
        self.attempts.pop(task.id, None)
        self.resolved += 1

    def retry(self, now: float, user: _User) -> None:
        """Drop the expired stored tasks, then negotiate the one of highest priority."""
        if not user.queue:
            return
        queue = user.queue
        for t in queue.expire(now):
            self.finish(t, self.reason.get(t.id, F_DEADLINE))
        if not queue:
            return
        task = queue.pop(queue.best(self.cfg.strategy.priority, now))
        self.request(now, task)

    def on_reject(self, now: float, sed: int, task: Task, fresh: list[Offer]) -> None:
        """The provider ``sed`` could not honour the offer; ``fresh`` are its offers now,
        which replace the alternatives the user kept from that provider."""
        user = self.users[task.user]
        user.reserved -= self.reserved.pop(task.id)
        if self.cfg.strategy.alternatives and self.attempts.get(task.id, 0) < MAX_ATTEMPTS:
            alts = [o for o in self.alts.get(task.id, []) if o.sed != sed] + fresh
            self.alts[task.id] = alts
            if self._suitable(now, user, task, alts):
                self.choose(now, task, alts)
                return
        self.store(now, task, F_OFFER)

    def on_result(self, now: float, task: Task) -> None:
        user = self.users[task.user]
        prov, end, cost = self.placed.pop(task.id)
        held = self.reserved.pop(task.id)
        user.reserved -= held
        if end > task.deadline:
            self.finish(task, F_DEADLINE)  # finished too late: useless, not paid
        else:
            pay = min(cost, held)
            if pay > 0:
                self.ledger.transfer(user.name, f"provider-{prov}", pay, "task")
            self.finish(task, SUCCEEDED)
        self.retry(now, user)

    # --- the hierarchy and the providers --------------------------------------------------

    def on_down(self, now: float, node: int, task: Task) -> None:
        n = self.tree.nodes[node]
        d = self.cfg.delay
        if n.sed is not None:
            offers = self.providers[n.sed].offers(task, now, n.sed)
            self.push(now + d, UP, (n.parent, node, task, offers))
            return
        self.gathers[(node, task.id)] = diet.Gather(n.children)
        for c in n.children:
            self.push(now + d, DOWN, (c, task))

    def on_up(self, now: float, node: int, child: int, task: Task, offers: list[Offer]) -> None:
        key = (node, task.id)
        g = self.gathers[key]
        if not g.add(child, offers):
            return
        del self.gathers[key]
        parent = self.tree.nodes[node].parent
        if parent is None:
            self.push(now + self.cfg.delay, OFFERS, (task, g.offers))
        else:
            self.push(now + self.cfg.delay, UP, (parent, node, task, g.offers))

    def on_run(self, now: float, sed: int, task: Task, offer: Offer) -> None:
        prov = self.providers[sed]
        before = prov.next_vm
        placed = prov.run_task(task, offer, now, self.utility)
        d = self.cfg.delay
        if placed is None:
            fresh = prov.offers(task, now, sed) if self.cfg.strategy.alternatives else []
            self.push(now + d, REJECT, (sed, task, fresh))
            return
        self.vms_started += prov.next_vm - before
        user = self.users[task.user]
        cost = _micro(placed.cost)
        held = self.reserved[task.id]
        if cost < held:  # the re-check found it cheaper: hold only what will be paid
            user.reserved -= held - cost
            self.reserved[task.id] = cost
        self.placed[task.id] = (sed, placed.end, cost)
        self.push(placed.end, DONE, (sed, placed.vm, placed.pe, task))

    # --- the result -----------------------------------------------------------------------

    def result(self, now: float) -> dict[str, Any]:
        audit = self.ledger.audit()
        totals = dict.fromkeys(OUTCOMES, 0)
        value = {"succeeded": 0.0, "failed": 0.0}
        high = {"succeeded": 0, "total": 0}
        for u in self.users:
            for k in OUTCOMES:
                totals[k] += u.counts[k]
            for k in value:
                value[k] += u.value[k]
            for k in high:
                high[k] += u.high[k]
        low_total = self.total - high["total"]
        return {
            "tasks": self.total,
            **totals,
            "success_pct": 100.0 * totals[SUCCEEDED] / self.total if self.total else 0.0,
            "value_succeeded": value["succeeded"],
            "value_failed": value["failed"],
            "high": high,
            "low": {"succeeded": totals[SUCCEEDED] - high["succeeded"], "total": low_total},
            "per_group": [
                {g: sum(u.counts[g] for u in self.users if u.group == k) for g in OUTCOMES}
                for k in range(len(self.cfg.groups))
            ],
            "requests": self.requests,
            "vms_started": self.vms_started,
            "vms_stopped": self.vms_stopped,
            "peak_vms": self.peak_vms,
            "end_time": round(now, 3),
            "series": self.series,
            "bank": {
                "audit_ok": audit.ok and audit.minted == self.minted and audit.burned == 0,
                "minted": audit.minted,
                "burned": audit.burned,
                "sum_of_balances": audit.sum_of_balances,
                "redistributions": self.redistributions,
            },
        }


def simulate(cfg: Config, progress: Callable[[int, int], None] | None = None) -> dict[str, Any]:
    """Run ``cfg`` to the end (every task succeeded or failed); the result: counts per outcome
    (``succeeded``, ``failed_budget``, ``failed_deadline``, ``failed_offer``), ``success_pct``,
    Σ importance of succeeded and failed tasks, the same by importance class and per group,
    the time series (``series``: allocated/running PEs, queued tasks, CPU prices, run and
    failed tasks per group, every ``sample_period``) and ``bank`` (``audit_ok``: the books
    balance and no money was minted after t = 0)."""
    return Simulation(cfg, progress).run()
