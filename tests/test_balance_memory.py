"""The tabu search leaves nothing for the garbage collector: a search and its shortcuts are
freed by reference counting when the caller lets them go (a Search <-> Shortcuts cycle held
~300 KiB a search until a full collection: ``bench period``'s peak grew from 54 to 217 MiB on
3,000 jobs)."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from merkat.market import BalanceParams, Hosts, VMs, clear
from merkat.market.balance import search_mapping
from merkat.market.types import NO_HOST


def _crowded() -> tuple[Hosts, VMs, BalanceParams]:
    rng = np.random.default_rng(7)
    n_hosts, n = 12, 60
    bid = np.zeros((n, 2))
    bid[:, 0] = rng.choice([0.05, 0.4, 1.0, 2.5], n)
    host = rng.integers(0, 3, n)  # piled on three nodes: the search has moves to make
    host[:5] = NO_HOST
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)),
                  np.column_stack([np.ones(n_hosts), np.full(n_hosts, 8192.0)]))
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid,
              np.column_stack([np.ones(n), np.full(n, 4096.0)]), host, np.zeros((n, 2)))
    return hosts, vms, BalanceParams(max_migrations=20, error_threshold=0.0, candidates=3)


def test_a_search_is_freed_without_the_garbage_collector() -> None:
    hosts, vms, params = _crowded()
    ideal = np.full((len(vms), 2), 1.0 / len(vms))
    gc.disable()
    try:
        result, search = search_mapping(hosts, vms, vms.host.copy(), ideal, params)
        assert result.ran and result.iterations > 0  # the shortcuts were built and used
        gone = weakref.ref(search)
        del search
        assert gone() is None, "the search is held by a reference cycle"
    finally:
        gc.enable()


def test_a_clearing_leaves_no_garbage() -> None:
    hosts, vms, params = _crowded()
    gc.collect()
    gc.disable()
    try:
        for _ in range(3):
            clear(hosts, vms, params=params)
        assert gc.collect() == 0  # nothing was left for the collector
    finally:
        gc.enable()


def test_a_search_that_raises_is_freed_too(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import importlib

    balance = importlib.import_module("merkat.market.balance")
    seen: list[object] = []

    def failing(search: object, *a: object) -> None:
        seen.append(search)
        raise RuntimeError("a search that fails midway")

    monkeypatch.setattr(balance, "_search_loop", failing)
    hosts, vms, params = _crowded()
    ideal = np.full((len(vms), 2), 1.0 / len(vms))
    gc.disable()
    try:
        with pytest.raises(RuntimeError, match="fails midway"):
            balance.search_mapping(hosts, vms, vms.host.copy(), ideal, params)
        gone = weakref.ref(seen.pop())
        assert gone() is None, "the failed search is held by a reference cycle"
    finally:
        gc.enable()
