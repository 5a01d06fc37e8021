"""Themis Fig. 2's load balancer: the tabu search's moves as the Themis paper states them.

The search (:func:`merkat.market.balance.search_mapping` with ``BalanceParams.rule ==
"themis"``) shares Merkat's state, allocation errors and measure, and differs in the move each
iteration makes (Themis §III-B, Fig. 2):

- **source**: the *most overloaded* node, its load being ``max_r (Σ ideal_r of its VMs) /
  capacity_r`` over the resources that count (the share its VMs deserve against what the node
  has; ties: the lower node index). A node none of whose VMs may leave is passed over for the
  next most loaded;
- **VM**: the *least valuable* VM of that node whose pair (VM, node) is not in the tabu list,
  its value being its bid (summed over resources; ties: the lower VM index);
- **destination**: the *least overloaded* node (worst fit: the lowest load as above; ties: the
  lower index), other than the source, where the VM's minimums fit; none: no move;
- the pair (VM, source) enters the tabu list (``tabu_size`` pairs, 20; the oldest leaves);
- the mapping is a new best when the standard deviation of the VM errors about 0 (their root
  mean square, as Merkat's) falls and its migrations are within the budget (``cost <
  CostMax``);
- it stops when that deviation is within ``error_threshold``, after ``max_no_improve``
  iterations without a new best (10 in Themis: :func:`merkat.market.types.balancer_params`),
  when the VM to move would exceed the migration budget, or after ``max_iterations``.

Pure and deterministic (ties broken by index). The caller has run the search's ``prepare``.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np
import numpy.typing as npt

from merkat.market.types import NO_HOST, BalanceParams, FloatArray, Hosts, IntArray, VMs


class ThemisState(Protocol):
    """What the loop needs of :class:`merkat.market.balance_state.Search`."""

    hosts: Hosts
    vms: VMs
    ideal: FloatArray
    host: IntArray
    host_l: list[int]
    err: FloatArray
    err_res: list[int]
    has_min: bool
    free: FloatArray
    migrations: int

    def rms(self) -> float: ...

    def costs_migration(self, v: int) -> bool: ...

    def move(self, v: int, dst: int) -> None: ...


def themis_loop(
    search: ThemisState, params: BalanceParams, rms0: float
) -> tuple[int, IntArray, float]:
    """Themis Fig. 2's iterations (module docstring): (iterations, best mapping, its rms)."""
    hosts, vms = search.hosts, search.vms
    n_hosts = len(hosts)
    res = search.err_res or list(range(hosts.capacity.shape[1]))
    cap = hosts.capacity[:, res]
    placed = search.host >= 0
    demand = np.zeros((n_hosts, len(res)))
    for k, r in enumerate(res):
        demand[:, k] = np.bincount(search.host[placed], weights=search.ideal[placed, r],
                                   minlength=n_hosts)
    ideal_v = search.ideal[:, res]
    value: list[float] = vms.bid.sum(axis=1).tolist()
    members: list[list[int]] = [[] for _ in range(n_hosts)]
    for v in np.flatnonzero(placed).tolist():
        members[search.host_l[v]].append(v)

    def load() -> npt.NDArray[np.float64]:
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(cap > 0, demand / np.where(cap > 0, cap, 1.0),
                             np.where(demand > 0, np.inf, 0.0))
        out: npt.NDArray[np.float64] = ratio.max(axis=1) if ratio.shape[1] else np.zeros(n_hosts)
        return out

    best_host, best_rms = search.host.copy(), rms0
    tabu: deque[tuple[int, int]] = deque()
    tabu_set: set[tuple[int, int]] = set()
    no_improve = it = 0
    while it < params.max_iterations:
        loads = load()
        pick = NO_HOST
        src = NO_HOST
        for h in np.argsort(-loads, kind="stable").tolist():
            free = [v for v in members[h] if (v, h) not in tabu_set]
            if free:
                pick = min(free, key=lambda v: (value[v], v))
                src = h
                break
        if pick == NO_HOST:
            break  # every (VM, node) pair is tabu
        if search.costs_migration(pick) and search.migrations >= params.max_migrations:
            break  # the move would exceed the migration budget
        it += 1
        ok = np.ones(n_hosts, dtype=bool)
        ok[src] = False
        if search.has_min:
            ok &= (search.free >= vms.minimum[pick]).all(axis=1)
        dst = NO_HOST
        if ok.any():
            dst = int(np.flatnonzero(ok)[np.argmin(loads[ok])])
            search.move(pick, dst)
            members[src].remove(pick)
            members[dst].append(pick)
            demand[src] -= ideal_v[pick]
            demand[dst] += ideal_v[pick]
        tabu.append((pick, src))
        tabu_set.add((pick, src))
        if len(tabu) > params.tabu_size:
            tabu_set.discard(tabu.popleft())
        rms = search.rms()
        if (dst != NO_HOST and rms < best_rms * (1.0 - 1e-9)
                and search.migrations <= params.max_migrations):
            best_host, best_rms, no_improve = search.host.copy(), rms, 0
            if rms <= params.error_threshold:
                break
        else:
            no_improve += 1
            if no_improve >= params.max_no_improve:
                break
    return it, best_host, best_rms
