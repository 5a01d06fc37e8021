"""Market mechanisms by name: the plug-in point of the period's clearing.

A mechanism turns one period's bids into placements, allocations and prices: the
:class:`Mechanism` interface is the one call :func:`merkat.market.clear` already answers, so the
platform (:class:`merkat.core.period.Platform`, ``market=NAME``) and ``merkat sim run
--market NAME`` can run any of them. :data:`MECHANISMS` (a :class:`merkat.registry.Registry`)
holds them by name; ``@MECHANISMS.register`` adds one (a class with a ``name``),
:func:`make_mechanism` builds one.

- ``proportional-share`` (default; Merkat §3, Themis §III): the cluster-wide proportional
  share — the ideal allocation and its price, worst-fit placement, the tabu search that brings
  the nodes' allocations close to the ideal (migrations), per-node proportional share with caps.
- ``tycoon`` (Tycoon §2.2): a continuous proportional-share auction on every host, no
  cluster-wide rebalancing: a VM stays on the host it was placed on (new VMs: worst fit), gets
  its bid's share of that host (capped), and the host's price is its bids over its capacity.
  The platform's one price per resource is the capacity-weighted mean of the hosts' prices.
- ``posted`` (the grid-cloud model §3.2, eq. 5): the provider posts a price per resource unit;
  a VM buys what its bid pays for at that price (at most its cap); a host that is asked for
  more than it has rations its VMs in proportion to what they asked; after each period the
  price follows eq. 5 (:class:`merkat.market.posted.PostedPrices`) on the demand against the
  cluster's capacity, between the reserve price and 10¹² times it; a resource without a finite
  capacity stays at the reserve. Stateful (the price carries over): never memoised.
  Charge it by use (``--charging use``): a VM then pays the posted price of what it got.
- ``drf`` (beyond the papers; docs/market.md, "The DRF-aware market"): each VM's bids are one
  bid for its bundle (its size: CPU and memory in its VM's proportions), which it gets a
  fraction of, the same on every resource, at one price per unit of dominant share
  (:func:`merkat.market.drf.bundle_share`), cluster-wide for the ideal and per node for the
  enforceable allocation; new VMs placed by worst fit, no load balancing (no migrations). The
  price of resource r reported is the dominant-share price over the cluster's capacity of r.

Pure: no I/O, no clock (timings are ``perf_counter`` deltas as in :func:`clear`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np

from merkat.market.allocation_error import enforceable, vm_errors
from merkat.market.balance import BalanceResult
from merkat.market.clear import Clearing, Migration, check_reserve, clear, ideal_allocation
from merkat.market.drf import bundle_share
from merkat.market.placement import worst_fit_decreasing
from merkat.market.posted import PostedPrices as Posted
from merkat.market.types import NO_HOST, RESOURCES, BalanceParams, FloatArray, Hosts, VMs
from merkat.registry import Registry, UnknownName


class MechanismError(ValueError):
    """An unknown mechanism name or a bad parameter (the message lists the known names)."""


class UnknownMechanism(UnknownName, MechanismError):
    """An unknown mechanism name."""


class Mechanism(ABC):
    """One market mechanism. ``stateless``: the clearing is a pure function of its input (the
    platform may reuse the last one when nothing changed)."""

    name: ClassVar[str] = "mechanism"
    summary: ClassVar[str] = ""
    stateless: ClassVar[bool] = True

    @abstractmethod
    def clear(self, hosts: Hosts, vms: VMs, *, reserve_price: FloatArray,
              params: BalanceParams) -> Clearing:
        """The period's clearing of ``vms`` (bids, caps, current hosts) on ``hosts``."""


MECHANISMS: Registry[type[Mechanism]] = Registry("market mechanism", error=UnknownMechanism)
"""Every mechanism, by name."""


def make_mechanism(name: str) -> Mechanism:
    """A fresh mechanism ``name``; :class:`MechanismError` naming the known ones."""
    return MECHANISMS.get(name)()


def _check_hosts(hosts: Hosts, vms: VMs) -> None:
    from merkat.market.types import MarketError

    bad = np.flatnonzero((vms.host < NO_HOST) | (vms.host >= len(hosts)))
    if bad.size:
        i = int(bad[0])
        raise MarketError(f"vms[{i}].host", f"host index {vms.host[i]} is not a known host")


def _mean_price(hosts: Hosts, node_price: FloatArray) -> FloatArray:
    cap = hosts.capacity
    total = cap.sum(axis=0) if len(hosts) else np.zeros(len(RESOURCES))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(total > 0, (node_price * cap).sum(axis=0) / total, 0.0)
    return np.asarray(out, dtype=np.float64)


@MECHANISMS.register
class ProportionalShare(Mechanism):
    name = "proportional-share"
    summary = "Merkat/Themis: cluster-wide proportional share, placement and load balancing"

    def clear(self, hosts: Hosts, vms: VMs, *, reserve_price: FloatArray,
              params: BalanceParams) -> Clearing:
        return clear(hosts, vms, reserve_price=reserve_price, params=params)


@MECHANISMS.register
class TycoonAuctions(Mechanism):
    name = "tycoon"
    summary = "Tycoon: a proportional-share auction per host, VMs stay where they were placed"

    def clear(self, hosts: Hosts, vms: VMs, *, reserve_price: FloatArray,
              params: BalanceParams) -> Clearing:
        _check_hosts(hosts, vms)
        check_reserve(vms, reserve_price)
        ideal, _ = ideal_allocation(hosts, vms)
        host = worst_fit_decreasing(hosts, vms)
        allocation, node_price = enforceable(hosts, vms, host)
        error = np.where(host >= 0, vm_errors(allocation, ideal), np.nan)
        rms = float(np.sqrt(np.nanmean(error ** 2))) if np.isfinite(error).any() else 0.0
        return Clearing(_mean_price(hosts, node_price), ideal, allocation, host, error,
                        node_price, (), BalanceResult(host, 0, rms, rms, False))


@MECHANISMS.register
class PostedPrices(Mechanism):
    name = "posted"
    summary = "grid-cloud model: posted prices per unit, adapted every period by eq. 5"
    stateless = False

    def __init__(self) -> None:
        self.posted: Posted | None = None  # the priced resources' state (eq. 5)
        self.price: FloatArray | None = None  # per resource, credits per unit per period

    def _start(self, hosts: Hosts, floor: FloatArray) -> Posted:
        capacity = hosts.capacity.sum(axis=0) if len(hosts) else np.zeros(len(RESOURCES))
        priced = [k for k in range(len(RESOURCES))
                  if np.isfinite(capacity[k]) and capacity[k] > 0]
        return Posted(prices={RESOURCES[k]: float(floor[k]) for k in priced},
                      capacity={RESOURCES[k]: float(capacity[k]) for k in priced},
                      floor={RESOURCES[k]: float(floor[k]) for k in priced})

    def clear(self, hosts: Hosts, vms: VMs, *, reserve_price: FloatArray,
              params: BalanceParams) -> Clearing:
        _check_hosts(hosts, vms)
        check_reserve(vms, reserve_price)
        floor = np.maximum(np.asarray(reserve_price, dtype=np.float64), 1e-9)
        if self.posted is None:
            self.posted = self._start(hosts, floor)
            self.price = floor.copy()
        assert self.price is not None
        price = self.price
        n, n_res = vms.bid.shape if len(vms) else (0, len(RESOURCES))
        with np.errstate(divide="ignore", invalid="ignore"):
            asked = np.minimum(vms.cap, np.where(price > 0, vms.bid / price, vms.cap))
        asked = np.where(np.isfinite(asked), asked, 0.0)
        host = worst_fit_decreasing(hosts, vms) if n else np.zeros(0, dtype=np.int64)
        allocation = np.zeros((n, n_res))
        node_price = np.zeros((len(hosts), n_res))
        placed = np.flatnonzero(host >= 0)
        if placed.size:
            h = host[placed]
            load = np.zeros((len(hosts), n_res))
            np.add.at(load, h, asked[placed])
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(load > hosts.capacity, hosts.capacity / load, 1.0)
            allocation[placed] = asked[placed] * scale[h]
            node_price[:] = price
        demand = asked[placed].sum(axis=0) if placed.size else np.zeros(n_res)
        new = self.posted.update({r: float(demand[RESOURCES.index(r)])
                                  for r in self.posted.prices})
        self.price = np.array([new.get(r, float(price[k])) for k, r in enumerate(RESOURCES)])
        ideal = asked
        error = np.where(host >= 0, vm_errors(allocation, ideal), np.nan) if n else np.zeros(0)
        return Clearing(price.copy(), ideal, allocation, host, error, node_price,
                        tuple[Migration, ...](), BalanceResult(host, 0, 0.0, 0.0, False))


@MECHANISMS.register
class DRFBundles(Mechanism):
    name = "drf"
    summary = "DRF-aware: one bid per VM for its bundle (CPU and memory in its VM's " \
              "proportions), priced per unit of dominant share"

    def clear(self, hosts: Hosts, vms: VMs, *, reserve_price: FloatArray,
              params: BalanceParams) -> Clearing:
        _check_hosts(hosts, vms)
        check_reserve(vms, reserve_price)
        n, n_res = vms.bid.shape if len(vms) else (0, len(RESOURCES))
        bid = vms.bid.sum(axis=1) if n else np.zeros(0)
        total = hosts.capacity.sum(axis=0) if len(hosts) else np.zeros(n_res)
        x, p = bundle_share(bid, vms.cap, total)
        ideal = x[:, None] * np.minimum(vms.cap, total[None, :]) if n else np.zeros((0, n_res))
        host = worst_fit_decreasing(hosts, vms) if n else np.zeros(0, dtype=np.int64)
        allocation = np.zeros((n, n_res))
        node_price = np.zeros((len(hosts), n_res))
        for h in np.unique(host[host >= 0]).tolist():
            on = np.flatnonzero(host == h)
            cap_h = hosts.capacity[h]
            xh, ph = bundle_share(bid[on], vms.cap[on], cap_h)
            allocation[on] = xh[:, None] * np.minimum(vms.cap[on], cap_h[None, :])
            with np.errstate(divide="ignore", invalid="ignore"):
                node_price[h] = np.where(cap_h > 0, ph / cap_h, 0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            price = np.where(total > 0, p / total, 0.0)
        error = np.where(host >= 0, vm_errors(allocation, ideal), np.nan) if n else np.zeros(0)
        rms = float(np.sqrt(np.nanmean(error ** 2))) if np.isfinite(error).any() else 0.0
        return Clearing(np.asarray(price, dtype=np.float64), ideal, allocation, host, error,
                        node_price, (), BalanceResult(host, 0, rms, rms, False))
