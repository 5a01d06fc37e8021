"""Load balancing by tabu search (Themis Fig. 2, Merkat §3.1) on the allocation error
(:mod:`merkat.market.allocation_error`: a VM's ``max_r |(a_r - â_r) / a_r|``, enforceable
against ideal allocation).

The search starts from the current mapping and, at each iteration, moves the VM with the largest
error that is not tabu to the node that minimises that VM's error; the VM becomes tabu for the
next ``tabu_size`` moves. The best mapping seen is kept, judged by the standard deviation of the
VM errors about their target 0 (their root mean square). The search stops when every error is
within the threshold, after ``max_no_improve`` iterations without a better mapping, when the VM
to move would take the period over its migration budget (the SLO paper: "if reaching a better
solution involves a number of migrations higher than a threshold"), or after
``max_iterations``. The result is
never worse than the starting mapping and never uses more migrations than the budget.
``BalanceParams.rule == "themis"`` replaces the moves by Themis Fig. 2's
(:mod:`merkat.market.balance_themis`) on the same state and measure.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from merkat.market.balance_loop import usual_loop
from merkat.market.balance_state import Search
from merkat.market.balance_themis import themis_loop
from merkat.market.types import NO_HOST, BalanceParams, FloatArray, Hosts, IntArray, VMs


@dataclass(frozen=True)
class BalanceResult:
    """The best mapping found, and how the search went."""

    host: IntArray
    iterations: int
    rms_before: float
    rms_after: float
    ran: bool


def balance(
    hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams
) -> BalanceResult:
    """Tabu-search load balancing from mapping ``host`` (see the module docstring).

    ``vms.host`` is the mapping at the start of the period: moving a VM away from it costs one
    migration, moving it back refunds it, and VMs new this period (``NO_HOST`` there) move
    freely. Returns the best mapping found (``host`` itself when balancing is not needed).
    """
    return search_mapping(hosts, vms, host, ideal, params)[0]


def search_mapping(
    hosts: Hosts, vms: VMs, host: IntArray, ideal: FloatArray, params: BalanceParams,
    traded: Sequence[bool] | None = None,
) -> tuple[BalanceResult, Search]:
    """:func:`balance`, and the search's state (for :func:`merkat.market.clear` to reuse the
    starting mapping's clearing when the mapping does not change). ``traded``:
    :func:`~merkat.market.types.bid_on` of ``vms.bid`` when the caller has it."""
    search = Search(hosts, vms, host, ideal, params, traded)
    rms0 = search.rms()
    # (an unplaced VM's error is 0 and stays 0, so no need to select the placed ones)
    if len(hosts) < 2 or not (search.err > params.error_threshold).any():
        return BalanceResult(host.copy(), 0, rms0, rms0, ran=False), search

    search.prepare()
    loop: Callable[[Any, BalanceParams, float], tuple[int, IntArray, float]]
    if params.rule == "themis":
        loop = themis_loop
    elif search.fast is not None and search.fast.simple:
        loop = usual_loop  # the same iterations, inline (merkat.market.balance_loop)
    else:
        loop = _search_loop
    try:
        with np.errstate(divide="ignore", invalid="ignore"):  # in destination's estimates
            it, best_host, best_rms = loop(search, params, rms0)
    finally:
        # The shortcuts refer back to the search: drop them when the loop ends (or raises),
        # so the pair is freed by reference counting when the caller lets the search go (a
        # cycle waits for the garbage collector and held ~300 KiB a search: 200 MiB on 3,000
        # jobs). Nothing after the loop reads them (tests/test_balance_memory.py).
        search.fast = None
    return BalanceResult(best_host, it, rms0, best_rms, ran=True), search


def _search_loop(
    search: Search, params: BalanceParams, rms0: float
) -> tuple[int, IntArray, float]:
    """The tabu search's iterations: (iterations, best mapping, its rms). The search's
    small methods (``costs_migration``, ``set_tabu``, ``rms``) are inlined: the same
    operations on the same state (its arrays and lists are changed in place, never
    replaced, while the loop runs)."""
    best_host, best_rms = search.host.copy(), rms0
    tabu: deque[int] = deque()
    no_improve, it = 0, 0
    score, err, is_tabu = search.score, search.err, search.is_tabu
    initial, where = search.initial_l, search.host_l
    threshold, n_placed = params.error_threshold, search.n_placed
    while it < params.max_iterations:
        v = int(score.argmax())
        if score[v] < 0:
            break  # every placed VM is tabu
        init = initial[v]  # = search.costs_migration(v)
        if init != NO_HOST and where[v] == init and search.migrations >= params.max_migrations:
            break  # the better mapping would need more migrations than the budget allows
        it += 1
        dst = search.destination(v)
        if dst != NO_HOST:
            search.move(v, dst)
        # v becomes tabu; the oldest tabu VM is released when the list is full.
        tabu.append(v)
        is_tabu[v] = True  # = search.set_tabu(v, True)
        score[v] = -1.0
        if len(tabu) > params.tabu_size:
            u = tabu.popleft()  # = search.set_tabu(u, False)
            is_tabu[u] = False
            score[u] = err[u]
        rms = math.sqrt(max(search.sumsq, 0.0) / n_placed)  # = search.rms()
        if dst != NO_HOST and rms < best_rms * (1.0 - 1e-9):
            best_host, best_rms, no_improve = search.host.copy(), rms, 0
            if not (err > threshold).any():
                break
        else:
            no_improve += 1
            if no_improve >= params.max_no_improve:
                break
    return it, best_host, best_rms
