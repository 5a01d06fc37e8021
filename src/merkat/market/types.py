"""The market's vocabulary: resources, hosts, VM requests, parameters and errors.

Arrays are column-per-resource in the order of :data:`RESOURCES` (CPU in cores, memory in MiB).
Money is in credits per period (floats here; the bank keeps exact micro-credits).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import numpy.typing as npt

RESOURCES: tuple[str, ...] = ("cpu", "memory")
"""The resources traded, each on its own market with its own price."""

CPU, MEMORY = 0, 1
NO_HOST = -1
"""Host index of a VM that is not placed on any node."""

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def row_max(a: FloatArray) -> FloatArray:
    """``a.max(axis=1)`` of a 2-D array, column by column: numpy's reduction along a short last
    axis costs ~20 µs for 600 rows of 2 columns, ``np.maximum`` of the columns ~2 µs. The same
    ufunc on the same pairs in the same order, so the same values (NaN propagates)."""
    if a.ndim != 2 or a.shape[1] == 0:
        out: FloatArray = a.max(axis=1)
        return out
    out = a[:, 0].copy()
    for r in range(1, a.shape[1]):
        np.maximum(out, a[:, r], out=out)
    return out


def row_sum(a: FloatArray) -> FloatArray:
    """``a.sum(axis=1)`` of a 2-D array, as one addition of the two columns when there are
    two (~5x faster on a few hundred rows); numpy's own reduction otherwise. Bit for bit the
    same: two terms round once whatever the order, and numpy's reduction starts from +0.0,
    which only shows when both terms are zeros (``-0.0 + -0.0`` gives 0.0): hence ``+ 0.0``."""
    if a.ndim == 2 and a.shape[1] == 2:
        out: FloatArray = a[:, 0] + a[:, 1]
        out += 0.0
        return out
    total: FloatArray = a.sum(axis=1)
    return total


def bid_on(bid: FloatArray) -> list[bool]:
    """Per resource (column of ``bid``, an ``(n, R)`` array of bids ``>= 0`` or NaN, as
    :class:`VMs` holds), whether some VM bids a non-zero amount on it (NaN counts): a column
    without is an untraded resource, which every clearing leaves at 0.

    The columns' sums by one matrix-vector product (~4 us on 900 VMs, against ~20 us for
    ``bid.any(axis=0)``, numpy's reduction along the long axis): a sum of terms ``>= 0`` is
    non-zero exactly when one term is (an addition of non-negative numbers never rounds a
    positive sum to 0; ``-0.0`` terms sum to a zero; NaN and overflow stay non-zero).
    ``tests/test_market_clear.py`` compares it with ``any``."""
    if bid.ndim != 2 or bid.shape[0] == 0:
        return [bool(x) for x in np.asarray(bid.any(axis=0)).tolist()]
    sums: list[float] = (bid.T @ np.ones(bid.shape[0])).tolist()
    return [x != 0.0 for x in sums]


class MarketError(ValueError):
    """Invalid market input. ``field`` names the offending input (e.g. ``vms[3].bid.cpu``)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _matrix(name: str, value: npt.ArrayLike, rows: int) -> FloatArray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0 and rows == 0:
        arr = arr.reshape(0, len(RESOURCES))
    if arr.shape != (rows, len(RESOURCES)):
        raise MarketError(name, f"expected shape ({rows}, {len(RESOURCES)}), got {arr.shape}")
    return arr


@dataclass(frozen=True)
class Hosts:
    """The nodes of the cluster: ``ids[h]`` and ``capacity[h, r]`` (cores, MiB).

    Never written after it is made (a new cluster is a new ``Hosts``: the live service swaps
    ``Platform.hosts``): the period's reuse of its last clearing (``Platform._clear``, by
    identity) and the derived terms below rely on it."""

    ids: tuple[str, ...]
    capacity: FloatArray

    def __post_init__(self) -> None:
        cap = _matrix("hosts.capacity", self.capacity, len(self.ids))
        object.__setattr__(self, "capacity", cap)
        bad = np.flatnonzero(~np.isfinite(cap).all(axis=1) | (cap < 0).any(axis=1))
        if bad.size:
            h = int(bad[0])
            raise MarketError(f"hosts[{h}]", f"capacity of {self.ids[h]!r} must be finite and >= 0")
        if len(set(self.ids)) != len(self.ids):
            raise MarketError("hosts", "host ids must be unique")

    def __len__(self) -> int:
        return len(self.ids)

    # Derived once per cluster (a run keeps one ``Hosts``; its capacity is never written):
    # worst-fit reads them at every placement.
    @cached_property
    def all_have_capacity(self) -> bool:
        """Whether every node has some of every resource (no zero capacity)."""
        return bool((self.capacity > 0).all())

    @cached_property
    def total(self) -> FloatArray:
        """The cluster's capacity per resource, ``capacity.sum(axis=0)`` (zeros without
        nodes): the ideal allocation's market, one per clearing."""
        if not len(self.ids):
            return np.zeros(len(RESOURCES))
        out: FloatArray = self.capacity.sum(axis=0)
        return out

    @cached_property
    def capacity_lists(self) -> list[list[float]]:
        """``capacity.T.tolist()``: per resource, every node's capacity as a Python float
        (the load balancer's start reads it; read only, shared by every search)."""
        out: list[list[float]] = self.capacity.T.tolist()
        return out

    @cached_property
    def has_capacity(self) -> npt.NDArray[np.bool_]:
        """``capacity > 0`` per node and resource (read only)."""
        return self.capacity > 0

    @cached_property
    def everywhere(self) -> list[bool]:
        """Per resource, whether every node has some of it."""
        return [bool(self.has_capacity[:, r].all()) for r in range(self.capacity.shape[1])]

    @cached_property
    def inv_capacity(self) -> FloatArray:
        """``1 / capacity`` per node and resource, ``inf`` where a node has none."""
        cap = self.capacity
        with np.errstate(divide="ignore"):
            out: FloatArray = np.where(cap > 0, 1.0 / np.where(cap > 0, cap, 1.0), np.inf)
        return out


@dataclass(frozen=True)
class VMs:
    """VM requests for one period.

    ``bid[i, r]``: credits per period VM ``i`` offers for resource ``r`` (>= 0).
    ``cap[i, r]``: the maximum useful allocation (``inf`` = no cap).
    ``minimum[i, r]``: what a node must be able to hold for the VM to be placed there
    (the memory minimum in Merkat; zero when not given).
    ``host[i]``: current host index or :data:`NO_HOST` for a VM to be placed.
    """

    ids: tuple[str, ...]
    bid: FloatArray
    cap: FloatArray
    host: IntArray
    minimum: FloatArray = field(default_factory=lambda: np.zeros((0, len(RESOURCES))))

    def __post_init__(self) -> None:
        n = len(self.ids)
        object.__setattr__(self, "bid", _matrix("vms.bid", self.bid, n))
        object.__setattr__(self, "cap", _matrix("vms.cap", self.cap, n))
        minimum = self.minimum if np.size(self.minimum) else np.zeros((n, len(RESOURCES)))
        object.__setattr__(self, "minimum", _matrix("vms.minimum", minimum, n))
        host = np.asarray(self.host, dtype=np.int64)
        if host.shape != (n,):
            raise MarketError("vms.host", f"expected {n} host indices, got shape {host.shape}")
        object.__setattr__(self, "host", host)
        for name, arr, allow_inf in (
            ("bid", self.bid, False),
            ("max", self.cap, True),
            ("min", self.minimum, False),
        ):
            # Fast check first (NaN fails ``>= 0``); the slow one names the offending entry.
            if (arr >= 0).all() and (allow_inf or np.isfinite(arr).all()):
                continue
            bad = np.argwhere(np.isnan(arr) | (arr < 0) | (~allow_inf & np.isinf(arr)))
            if bad.size:
                i, r = (int(x) for x in bad[0])
                raise MarketError(
                    f"vms[{i}].{name}.{RESOURCES[r]}",
                    f"{arr[i, r]} is not allowed for VM {self.ids[i]!r} (must be a finite number >= 0)",
                )
        if len(set(self.ids)) != n:
            raise MarketError("vms", "VM ids must be unique")

    def __len__(self) -> int:
        return len(self.ids)


BALANCERS = ("merkat", "themis")
"""The load balancers (``--balancer``): Merkat's largest-error rule (the default), Themis
Fig. 2's least-valuable-VM rule."""

THEMIS_NO_IMPROVE = 10
"""Themis §III-B: the search stops after 10 iterations without a better solution."""


def balancer_params(name: str) -> BalanceParams:
    """The balancing parameters of load balancer ``name`` (one of :data:`BALANCERS`):
    ``merkat``: the defaults; ``themis``: ``rule="themis"`` and the paper's stop after
    :data:`THEMIS_NO_IMPROVE` non-improving iterations (tabu list 20, the other defaults)."""
    if name == "themis":
        return BalanceParams(rule="themis", max_no_improve=THEMIS_NO_IMPROVE)
    if name == "merkat":
        return BalanceParams()
    raise MarketError("balancer", f"{name!r} is not one of {', '.join(BALANCERS)}")


@dataclass(frozen=True)
class BalanceParams:
    """Load-balancing parameters (Themis Fig. 2, Merkat §3.1).

    ``error_threshold``: balancing runs only when some VM's error exceeds it, and stops when
    every error is within it (default 10 %). ``max_migrations``: the migration budget per period.
    ``tabu_size``: how many recently moved VMs may not move again (20). ``max_no_improve``:
    stop after this many iterations without a better mapping (100, the SLO paper).
    ``max_iterations``: a hard bound on the search, whatever happens.
    ``candidates``: how many destination nodes (ranked by a closed-form estimate) are evaluated
    exactly for each move. ``rule``: which move each iteration makes — ``merkat`` (the VM with
    the largest error to the node minimising it, :mod:`merkat.market.balance`) or ``themis``
    (Themis Fig. 2: the least valuable VM of the most overloaded node to the least loaded,
    :mod:`merkat.market.balance_themis`; :func:`balancer_params` gives its paper defaults).
    """

    error_threshold: float = 0.10
    max_migrations: int = 20
    tabu_size: int = 20
    max_no_improve: int = 100
    max_iterations: int = 1000
    candidates: int = 8
    rule: str = "merkat"

    def __post_init__(self) -> None:
        if self.rule not in BALANCERS:
            raise MarketError("balance.rule", f"{self.rule!r} is not one of "
                                              f"{', '.join(BALANCERS)}")
        if not (self.error_threshold >= 0 and np.isfinite(self.error_threshold)):
            raise MarketError("balance.error_threshold", "must be a finite number >= 0")
        for name in ("max_migrations", "tabu_size", "max_no_improve", "max_iterations"):
            if getattr(self, name) < 0:
                raise MarketError(f"balance.{name}", "must be >= 0")
        if self.candidates < 1:
            raise MarketError("balance.candidates", "must be >= 1")
