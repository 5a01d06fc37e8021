"""The Tycoon grid market in the simulator: per-host auctions, Best Response agents, charging
by use with refunds, boosting, and jobs funded by transfer tokens (Tycoon §2.2, §3, §5.2).

It runs on the runtime's one period loop (:func:`merkat.runtime.loop.loop_periods`, the loop
of :meth:`Driver.run <merkat.runtime.driver.Driver.run>`): a :class:`TycoonSim` is a
:class:`~merkat.runtime.loop.Periodic` world with a virtual clock, its jobs as arrivals (at
their launch times) and a period of ``interval_s`` (10 s). Its period is its own, not the
Merkat decision (:meth:`Platform.decide <merkat.core.period.Platform.decide>`): Tycoon has no
cluster-wide clearing, placement or controllers, its agents answer one after the other, and its
money moves through tokens, sub-accounts and host accounts settled every ``settle_every``
intervals, not through the driver's :class:`~merkat.runtime.economy.Economy`
(docs/architecture.md, "The driver and its configurations"). Each interval:

0. the hosts refresh their records in the Service Location Service
   (:mod:`merkat.market.sls`: capacity and the sum of their bids) every ``sls_refresh_s``
   seconds (the agents then see prices up to that old); with ``sls_refresh_s`` 0 (the default)
   the SLS is never stale: the hosts' records are refreshed before every query;
1. jobs due are launched: the user pays the broker, signs a transfer token
   (:mod:`merkat.bank.tokens`) naming the job, the broker redeems it into a sub-account, the
   agent asks the SLS for the best hosts (Best Response's w/y order; at most ``sls_limit``),
   Best Response over them picks the job's hosts (those it funds, best first, at most
   ``subjobs``; one VM per user per host) and the sub-account funds one host account per VM in
   proportion to the bids;
2. boosts due move more money from the user into the job's sub-account;
3. every running job's agent re-computes its bids by Best Response over its hosts against the
   others' current bids (users in launch order, each seeing the bids already updated this
   interval), optionally capped and damped; its spending rate is the money it has left over the
   time left to its deadline (at least ``min_horizon_s``);
4. every host clears its auction (:func:`merkat.market.tycoon.clear_hosts`, each VM capped at
   ``vm_cpus``); the VMs progress at their allocation and are charged by use;
5. every ``settle_every`` intervals, and when a job ends, the charges move from the host
   accounts to the provider in the ledger and the job's money is re-spread over its host
   accounts like its bids; a finished job's unspent money goes back to the user (the refund).

All money moves through a :class:`~merkat.bank.memory.MemoryLedger`; the run ends with its
audit (minted = Σ balances). A job's sub-jobs are one chunk per host it funds (at most
``subjobs``), as in the paper's tables where latency = time / nodes (docs/tycoon.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from merkat import seeds
from merkat.bank import tokens
from merkat.bank.ledger import AccountKind, Move
from merkat.bank.memory import MemoryLedger
from merkat.defaults import MICRO
from merkat.market.best_response import damped, solve
from merkat.market.sls import ServiceLocationService
from merkat.market.tycoon import charges_by_use, clear_hosts
from merkat.runtime.arrivals import Arrival, ListArrivals
from merkat.runtime.clock import VirtualClock
from merkat.runtime.loop import loop_periods
from merkat.worlds.tycoon.background import PriceSeries

PROVIDER = "provider"
BROKER = "broker"


@dataclass(frozen=True)
class TycoonJob:
    """A job: ``subjobs`` chunks of ``work_s`` CPU-seconds, ``budget`` credits to spend within
    ``deadline_s`` of its launch at ``launch_s``."""

    user: str
    budget: float
    deadline_s: float
    launch_s: float = 0.0
    subjobs: int = 15
    work_s: float = 212 * 60.0


@dataclass(frozen=True)
class Boost:
    """Add ``amount`` credits to ``user``'s running job at ``time_s``."""

    time_s: float
    user: str
    amount: float


@dataclass(frozen=True)
class TycoonConfig:
    hosts: int = 30
    cpus_per_host: float = 2.0
    vm_cpus: float = 1.0
    interval_s: float = 10.0
    reserve: float = 1e-5  # credits per second standing in for an empty host's others' bids
    capped: bool = False  # Best Response knows a VM uses at most vm_cpus
    beta: float = 1.0  # damping of the bid update (1: plain Best Response)
    settle_every: int = 60
    min_horizon_s: float = 600.0
    until_s: float = math.inf
    record_every: int = 1  # record the prices every k intervals (0: never)
    seed: int = 0  # its ``ties`` stream (merkat.seeds) breaks ties between equal bids
    sls_limit: int | None = None  # the most hosts the SLS returns to an agent (None: all)
    sls_refresh_s: float = 0.0  # hosts refresh their SLS record this often (0: on every change)
    sls_ttl_s: float | None = None  # a record's life without refresh (None: 3 refreshes)

    def __post_init__(self) -> None:
        if self.sls_limit is not None and self.sls_limit < 1:
            raise ValueError(f"sls_limit: must be >= 1, got {self.sls_limit}")
        if not self.sls_refresh_s >= 0:
            raise ValueError(f"sls_refresh_s: must be >= 0, got {self.sls_refresh_s}")
        if self.sls_ttl_s is not None and not self.sls_ttl_s > self.sls_refresh_s:
            raise ValueError(f"sls_ttl_s: must be > sls_refresh_s ({self.sls_refresh_s:g}: "
                             f"else every record expires before its refresh), "
                             f"got {self.sls_ttl_s}")

    @property
    def sls_ttl(self) -> float:
        """A record's life: ``sls_ttl_s``, else three refreshes (three intervals when hosts
        refresh on every change)."""
        if self.sls_ttl_s is not None:
            return self.sls_ttl_s
        return 3 * max(self.sls_refresh_s, self.interval_s)


@dataclass
class _Running:
    job: TycoonJob
    index: int
    sub: str
    hosts: npt.NDArray[np.int64]
    remaining: npt.NDArray[np.float64]
    bids: npt.NDArray[np.float64]
    accounts: list[str]
    done_at: npt.NDArray[np.float64]
    unsettled: npt.NDArray[np.float64]
    held: int = 0  # micro-credits in the sub-account and host accounts at the last settlement
    rate: float = 0.0  # credits per second: budget / deadline, raised by boosts
    charged: float = 0.0
    boosted: float = 0.0
    refund: float = 0.0
    carry: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))

    @property
    def deadline(self) -> float:
        return self.job.launch_s + self.job.deadline_s


@dataclass
class TycoonResult:
    jobs: list[dict[str, Any]]
    prices: npt.NDArray[np.float64]  # (records, hosts) spot prices, credits per CPU-second
    price_times: npt.NDArray[np.float64]
    audit_ok: bool
    minted: float
    provider_income: float
    refunded: float
    intervals: int


def _spread(total: int, weights: npt.NDArray[np.float64]) -> list[int]:
    """``total`` micro-credits split by ``weights`` (integers summing to ``total``)."""
    if total <= 0 or weights.sum() <= 0:
        return [0] * weights.size if total <= 0 else [total] + [0] * (weights.size - 1)
    raw = weights / weights.sum() * total
    out = np.floor(raw).astype(np.int64)
    out[int(np.argmax(raw))] += total - int(out.sum())
    return [int(v) for v in out]


class TycoonSim:
    """One run; :meth:`run` returns a :class:`TycoonResult`. The world of the runtime's loop
    (:class:`~merkat.runtime.loop.Periodic`, module doc)."""

    skip_idle = False  # every interval runs (and is recorded), jobs or not

    def __init__(self, config: TycoonConfig, jobs: Sequence[TycoonJob],
                 boosts: Sequence[Boost] = (), background: PriceSeries | None = None) -> None:
        self.cfg = config
        self.background = background
        # the jobs arrive at their launch times (equal times: in the order given)
        self.arrivals = ListArrivals([Arrival(job.launch_s, model=job, index=k)
                                      for k, job in enumerate(jobs)])
        self.boosts = sorted(boosts, key=lambda b: b.time_s)
        self.clock = VirtualClock()
        self.intervals = 0  # the intervals run so far
        self.prices: list[npt.NDArray[np.float64]] = []  # recorded every record_every
        self.times: list[float] = []
        self.bg: npt.NDArray[np.float64] | None = None  # this interval's outside bids
        self.total = np.zeros(config.hosts)  # this interval's bids per host
        self.ledger = MemoryLedger(journal=True)
        self.capacity = np.full(config.hosts, config.cpus_per_host)
        self.running: list[_Running] = []
        self.finished: list[dict[str, Any]] = []
        self.keys: dict[str, Any] = {}
        self.refunded = 0
        self.rng = seeds.stream(config.seed, "ties")
        self.sls = ServiceLocationService(config.sls_ttl)
        self.host_ids = list(range(config.hosts))
        self.refreshed_at = -math.inf
        self.ledger.create_account(PROVIDER, AccountKind.provider)
        self.ledger.create_account(BROKER, AccountKind.user)
        users = sorted({j.user for j in jobs} | {b.user for b in boosts})
        for u in users:
            self.ledger.create_account(u, AccountKind.user)
            priv = Ed25519PrivateKey.generate()
            self.ledger.register_key(u, tokens.raw_public(priv.public_key()))
            self.keys[u] = priv
            need = sum(j.budget for j in jobs if j.user == u) + sum(
                b.amount for b in boosts if b.user == u)
            if need > 0:
                self.ledger.mint(u, round(need * MICRO), "tycoon: the user's funds")
        self.minted = self.ledger.audit().minted

    # --- bids ------------------------------------------------------------------------------
    def _background_bids(self, now: float) -> npt.NDArray[np.float64] | None:
        """The outside bidder's bid on each host at ``now`` (credits per second): the recorded
        price times the host's CPUs, so that alone it would set the host's price to the
        recorded one (:mod:`merkat.worlds.tycoon.background`); None without a background."""
        if self.background is None:
            return None
        return self.capacity * self.background.cpu_at(now)

    def _total_bids(self, background: npt.NDArray[np.float64] | None = None
                    ) -> npt.NDArray[np.float64]:
        total = np.zeros(self.cfg.hosts) if background is None else background.copy()
        for r in self.running:
            np.add.at(total, r.hosts, r.bids)
        return total

    def _funds(self, r: _Running) -> float:
        """Credits the job still has: sub-account + host accounts − charges not yet settled."""
        return r.held / MICRO - float(r.unsettled.sum())

    def _respond(self, r: _Running, total: npt.NDArray[np.float64], now: float) -> None:
        active = r.remaining > 0
        new = np.zeros(r.hosts.size)
        if active.any():
            # Bid the job's rate, but never more than its money lasts for min_horizon_s.
            funds = max(self._funds(r), 0.0)
            rate = min(r.rate, funds / self.cfg.min_horizon_s)
            h = r.hosts[active]
            others = np.maximum(total[h] - r.bids[active], self.cfg.reserve)
            caps = np.full(h.size, self.cfg.vm_cpus) if self.cfg.capped else None
            x = solve(rate, self.capacity[h], others, caps)
            if self.cfg.beta < 1:
                x = damped(r.bids[active], x, self.cfg.beta)
            if rate > 0:
                # The VM exists: keep at least the reserve on it (a zero bid gets no CPU and
                # the sub-job would never end), within the spending rate.
                x = np.maximum(x, self.cfg.reserve)
                if x.sum() > rate:
                    x = x * (rate / x.sum())
            new[active] = x
        np.add.at(total, r.hosts, new - r.bids)
        r.bids = new

    # --- money -----------------------------------------------------------------------------
    def _launch(self, index: int, job: TycoonJob, now: float, total: npt.NDArray[np.float64]) -> None:
        amount = round(job.budget * MICRO)
        t = self.ledger.transfer(job.user, BROKER, amount, f"tycoon: fund job {index}")
        token = tokens.issue(self.ledger, t.id, f"job-{index}", self.keys[job.user],
                             nonce=f"job-{index}")
        sub = tokens.redeem(self.ledger, token).sub_account
        rate = job.budget / job.deadline_s
        caps = np.full(self.cfg.hosts, self.cfg.vm_cpus) if self.cfg.capped else None
        y = np.maximum(total, self.cfg.reserve)
        # The SLS offers the best hosts (w/y: the order Best Response fills them in; equal
        # hosts in a seeded random order), at the bids of their last refresh; Best Response
        # over them funds some, the job takes them best first, at most one VM per sub-job.
        found = self.sls.query(now, self.cfg.sls_limit, reserve=self.cfg.reserve,
                               tiebreak=self.rng.permutation(self.cfg.hosts))
        bids_of = {int(h.host): h.bids for h in found}  # type: ignore[call-overload]
        ranked = np.array(list(bids_of), dtype=np.int64)
        offered = np.sort(ranked)
        seen = np.maximum(np.array([bids_of[int(j)] for j in offered]), self.cfg.reserve)
        first = np.zeros(self.cfg.hosts)
        first[offered] = solve(rate, self.capacity[offered], seen,
                               None if caps is None else caps[offered])
        order = ranked[first[ranked] > 0]
        chosen = np.sort(order[: job.subjobs])
        if chosen.size == 0:  # nothing worth bidding on: take the cheapest host offered
            chosen = np.array([int(ranked[0]) if ranked.size else int(np.argmin(total))])
        accounts = [f"{sub}/h{j}" for j in chosen]
        for a in accounts:
            self.ledger.create_account(a, AccountKind.sub, owner=sub)
        bids = solve(rate, self.capacity[chosen], y[chosen], None if caps is None else caps[chosen])
        deposits = _spread(amount, bids if bids.sum() > 0 else np.ones(chosen.size))
        moves: list[Move] = [(sub, a, d) for a, d in zip(accounts, deposits, strict=True) if d]
        if moves:
            self.ledger.transfer_many(moves, f"tycoon: job {index} funds its host accounts")
        n = chosen.size
        r = _Running(job, index, sub, chosen.astype(np.int64), np.full(n, job.work_s),
                     np.zeros(n), accounts, np.full(n, np.nan), np.zeros(n), held=amount, rate=rate,
                     carry=np.zeros(n))
        self.running.append(r)
        self._respond(r, total, now)

    def _settle(self, r: _Running, final: bool) -> None:
        bal = self.ledger.balances([r.sub, *r.accounts])
        exact = r.unsettled + r.carry
        owed = np.floor(exact * MICRO).astype(np.int64)
        hosts_bal = np.array([bal[a] for a in r.accounts], dtype=np.int64)
        funds = int(hosts_bal.sum()) + bal[r.sub]
        if owed.sum() > funds:  # never more than the job holds (rounding, or a dry job)
            owed = np.array(_spread(funds, owed.astype(np.float64)), dtype=np.int64)
        r.carry = exact - owed / MICRO if not final else np.zeros(owed.size)
        r.unsettled = np.zeros(owed.size)
        r.charged += int(owed.sum()) / MICRO
        left = funds - int(owed.sum())
        weights = np.where(r.remaining > 0, r.bids, 0.0)
        target = [0] * len(r.accounts) if final else _spread(left, weights if weights.sum() > 0
                                                             else np.ones(len(r.accounts)))
        moves: list[Move] = []
        for a, c, b, d in zip(r.accounts, owed, hosts_bal, target, strict=True):
            if c > 0:
                moves.append((a, PROVIDER, int(c)))
            delta = int(d) - (int(b) - int(c))
            if delta > 0:
                moves.append((r.sub, a, delta))
            elif delta < 0:
                moves.append((a, r.sub, -delta))
        if final and left > 0:
            moves.append((r.sub, r.job.user, left))
            self.refunded += left
            r.refund = left / MICRO
        if moves:
            self.ledger.transfer_many(moves, f"tycoon: job {r.index} settles")
        r.held = 0 if final else left

    def _boost(self, b: Boost) -> None:
        for r in self.running:
            if r.job.user == b.user:
                self.ledger.transfer(b.user, r.sub, round(b.amount * MICRO),
                                     f"tycoon: boost job {r.index}")
                r.held += round(b.amount * MICRO)
                r.boosted += b.amount
                r.rate += b.amount / max(r.deadline - b.time_s, self.cfg.min_horizon_s)
                return
        raise ValueError(f"boost at {b.time_s} s: user {b.user!r} has no running job")

    # --- the loop (merkat.runtime.loop.Periodic) ---------------------------------------------
    @property
    def period(self) -> float:
        return self.cfg.interval_s

    def busy(self) -> bool:
        return bool(self.running)

    def idle(self, t: float) -> bool:
        return False

    def skip(self, t: float, arrival: float) -> float:
        return t

    def admit_due(self, now: float) -> None:
        """The interval at ``now`` begins: the hosts' bids (and the SLS refresh when due),
        then the jobs due are launched and the boosts due applied."""
        cfg = self.cfg
        self.bg = self._background_bids(now)
        total = self.total = self._total_bids(self.bg)
        if cfg.sls_refresh_s > 0 and now >= self.refreshed_at + cfg.sls_refresh_s:
            self.refreshed_at = now
            self.sls.register_many(self.host_ids, self.capacity, total, now)
        for arrival in self.arrivals.due(now):
            if cfg.sls_refresh_s == 0:  # never stale: the hosts' bids as they are now
                self.sls.register_many(self.host_ids, self.capacity, total, now)
            self._launch(arrival.index, arrival.model, now, total)
        while self.boosts and self.boosts[0].time_s <= now:
            self._boost(self.boosts.pop(0))

    def period_at(self, now: float) -> bool:
        """The interval at ``now``: every agent answers, the hosts clear, the VMs progress and
        are charged; the jobs done finish and the others settle when due. False when every
        running job is out of money and nothing is left to arrive (nothing can progress)."""
        cfg, total = self.cfg, self.total
        for r in self.running:
            self._respond(r, total, now)
        stalled = self.running and not any(r.bids.any() for r in self.running)
        if stalled and self.arrivals.next_time() is None and not self.boosts:
            return False
        self._interval(now, cfg.interval_s, self.bg)
        k = self.intervals
        if cfg.record_every and k % cfg.record_every == 0:
            self.prices.append(total / self.capacity)
            self.times.append(now)
        k = self.intervals = k + 1
        for r in list(self.running):
            if (r.remaining <= 0).all():
                self._finish(r)
            elif k % cfg.settle_every == 0:
                self._settle(r, final=False)
        return True

    def after(self, t0: float, t1: float) -> None:
        """Nothing happens between two intervals."""

    def run(self) -> TycoonResult:
        cfg = self.cfg
        loop_periods(self, cfg.until_s, start=0.0)
        for r in list(self.running):  # cut at until_s
            self._finish(r)
        audit = self.ledger.audit()
        prices = self.prices
        return TycoonResult(
            jobs=sorted(self.finished, key=lambda j: j["job"]),
            prices=np.array(prices) if prices else np.zeros((0, cfg.hosts)),
            price_times=np.array(self.times),
            audit_ok=audit.ok,
            minted=self.minted / MICRO,
            provider_income=self.ledger.balance(PROVIDER) / MICRO,
            refunded=self.refunded / MICRO,
            intervals=self.intervals,
        )

    def _interval(self, now: float, dt: float,
                  background: npt.NDArray[np.float64] | None = None) -> None:
        if not self.running:
            return
        hosts = np.concatenate([r.hosts for r in self.running])
        bids = np.concatenate([np.where(r.remaining > 0, r.bids, 0.0) for r in self.running])
        caps = np.full(hosts.size, self.cfg.vm_cpus)
        if background is not None:  # one outside bidder per host, after the jobs' VMs
            everywhere = np.arange(self.cfg.hosts)
            hosts = np.concatenate([hosts, everywhere])
            bids = np.concatenate([bids, background])
            caps = np.concatenate([caps, self.capacity])
        clearing = clear_hosts(self.capacity, hosts, bids, caps)
        at = 0
        for r in self.running:
            n = r.hosts.size
            alloc = clearing.allocation[at : at + n]
            ent = clearing.entitlement[at : at + n]
            at += n
            busy = r.remaining > 0
            work = alloc * dt
            ending = busy & (work >= r.remaining) & (alloc > 0)
            frac = np.where(ending, r.remaining / np.where(work > 0, work, 1.0), 1.0)
            r.done_at = np.where(ending, now + frac * dt, r.done_at)
            r.unsettled += charges_by_use(np.where(busy, r.bids, 0.0), alloc * frac, ent, dt)
            r.remaining = np.where(busy, np.maximum(r.remaining - work, 0.0), r.remaining)

    def _finish(self, r: _Running) -> None:
        self._settle(r, final=True)
        self.running.remove(r)
        job = r.job
        done = float(np.nanmax(r.done_at)) if not np.isnan(r.done_at).all() else math.nan
        complete = bool((r.remaining <= 0).all())
        time_h = (done - job.launch_s) / 3600 if complete else math.nan
        nodes = int(r.hosts.size)
        self.finished.append({
            "job": r.index,
            "user": job.user,
            "budget": job.budget,
            "nodes": nodes,
            "complete": complete,
            "time_h": time_h,
            "cost": r.charged,
            "cost_per_h": r.charged / time_h if complete and time_h > 0 else math.nan,
            "latency_min_per_job": time_h * 60 / nodes if complete else math.nan,
            "met_deadline": complete and done - job.launch_s <= job.deadline_s + 1e-9,
            "boosted": r.boosted,
            "refund": r.refund,
        })


def simulate(config: TycoonConfig, jobs: Sequence[TycoonJob],
             boosts: Sequence[Boost] = (), background: PriceSeries | None = None) -> TycoonResult:
    """Run the Tycoon market on ``jobs`` (and ``boosts``) until every job ends, against the
    recorded ``background`` prices if given (:mod:`merkat.worlds.tycoon.background`)."""
    return TycoonSim(config, jobs, boosts, background).run()
