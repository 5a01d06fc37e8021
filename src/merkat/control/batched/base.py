"""The batch's data and interface (:class:`Batch`, :class:`BatchDemand`,
:class:`BatchedPolicy`), the registry :data:`BATCHED`, and the element-wise helpers the
batched forms share (Python's ``max``/``min`` rules, the gap, the spend limit). See the
package docstring (:mod:`merkat.control.batched`)."""


from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from merkat.control.base import Controller
from merkat.registry import Registry

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

SUSPEND = "cannot afford the SLO"
"""The reason of a suspension a batch decides (the scalar path's, :meth:`Controller.decide
<merkat.control.base.Controller.decide>`)."""


def pymax(a: Any, b: Any) -> Any:
    """Python's ``max(a, b)`` element-wise: ``b`` where ``b > a``, else ``a`` (the first of
    equal values, and ``a`` when either is NaN and ``b > a`` is false)."""
    return np.where(b > a, b, a)


def pymin(a: Any, b: Any) -> Any:
    """Python's ``min(a, b)`` element-wise: ``b`` where ``b < a``, else ``a``."""
    return np.where(b < a, b, a)


@dataclass(frozen=True)
class Batch:
    """The observations of ``n`` running applications (every VM active) of one policy that
    trade the same ``resources`` (in :attr:`Observation.resources
    <merkat.control.types.Observation.resources>` order), as arrays with one column per
    application. NaN stands for a value not reported (``None``).

    ``prices``, ``capacity``, ``bid_min``: ``(R,)``; ``vm_size``, ``bid`` (the current bid,
    :func:`~merkat.control.formulas.mean_bid` over the VMs) and ``alloc`` (the smallest
    allocation, :func:`~merkat.control.formulas.least_alloc`): ``(R, n)``; ``balance``
    (credits), ``renewal``, ``deadline``, ``nvms`` (VM count), ``work_done``, ``work_total``,
    ``progress_rate``, ``ideal_rate``, ``performance`` (the generic metric v): ``(n,)``;
    ``state``: ``(k, n)``, what
    :meth:`BatchedPolicy.state` read of each controller."""

    time: float
    period: float
    resources: tuple[str, ...]
    prices: FloatArray
    capacity: FloatArray
    bid_min: FloatArray
    vm_size: FloatArray
    bid: FloatArray
    alloc: FloatArray
    balance: FloatArray
    renewal: FloatArray
    deadline: FloatArray
    nvms: FloatArray
    work_done: FloatArray
    work_total: FloatArray
    progress_rate: FloatArray
    ideal_rate: FloatArray
    state: FloatArray
    performance: FloatArray

    def __len__(self) -> int:
        return len(self.balance)


@dataclass(frozen=True)
class Rows:
    """The observations of a :class:`Batch` as the gather reads them (:mod:`merkat.core.batch`):
    Python lists, one entry per application, the input of a plain form
    (:meth:`BatchedPolicy.decide_rows`). ``rows[i]``: balance (credits), VM count, work done,
    work total, progress rate, ideal rate, the generic metric (None: not reported), then per
    resource the current bid, then per resource the smallest allocation; ``fixed[i]``: renewal,
    deadline, per resource the VM size, then the controller's parameters
    (:attr:`BatchedPolicy.fixed` of :meth:`BatchedPolicy.state`). :func:`batch_of` makes the
    numpy form's :class:`Batch` of the same values."""

    time: float
    period: float
    resources: tuple[str, ...]
    prices: list[float]
    capacity: list[float]
    bid_min: list[float]
    rows: Sequence[Sequence[float | None]]
    fixed: Sequence[Sequence[float]]

    def __len__(self) -> int:
        return len(self.rows)


def batch_of(rows: Rows, live: list[list[float]]) -> Batch:
    """The :class:`Batch` (arrays, None as NaN) of ``rows`` and the controllers' ``live`` state
    (:meth:`BatchedPolicy.live`)."""
    R = len(rows.resources)
    cols = np.array(rows.rows, dtype=np.float64).T  # (None: NaN)
    fixed = np.array(rows.fixed, dtype=np.float64).T
    state = np.array(live, dtype=np.float64).T
    return Batch(
        time=rows.time, period=rows.period, resources=rows.resources,
        prices=np.array(rows.prices, dtype=np.float64),
        capacity=np.array(rows.capacity, dtype=np.float64),
        bid_min=np.array(rows.bid_min, dtype=np.float64),
        balance=cols[0], renewal=fixed[0], deadline=fixed[1], nvms=cols[1],
        work_done=cols[2], work_total=cols[3], progress_rate=cols[4], ideal_rate=cols[5],
        performance=cols[6], vm_size=fixed[2:2 + R], bid=cols[7:7 + R],
        alloc=cols[7 + R:7 + 2 * R], state=np.concatenate((fixed[2 + R:], state)),
    )


@dataclass
class BatchDemand:
    """A batch's demands, one row each: ``declined`` (the batch does not cover this
    application's case: the scalar path decides, the batch moved none of its state), else
    ``stop`` (the reason, or None), else ``suspend`` (suspend every VM, :data:`SUSPEND`), else
    every VM bids ``bid`` (``(R, n)``, the batch's resources; a plain form gives ``values``
    instead, per row its bids in the resources' order) and the VM count is unchanged."""

    stop: list[str | None]
    suspend: list[bool]
    bid: FloatArray | None
    declined: list[bool] | None = None
    values: list[list[float]] | None = None

    def rows(self) -> list[list[float]]:
        """Per row, its bids in the resources' order (``values``, or ``bid`` by row)."""
        if self.values is not None:
            return self.values
        assert self.bid is not None
        out: list[list[float]] = self.bid.T.tolist()
        return out


class BatchedPolicy(Protocol):
    """The batched form of one registered policy (:data:`BATCHED`, by the policy's name)."""

    name: str
    fixed: int
    """How many leading entries of :meth:`state` are the controller's parameters, which never
    change (:mod:`merkat.core.batch` reads them once per application)."""

    def accepts(self, controller: Controller) -> bool:
        """Whether this batch decides for ``controller`` when its application runs (its exact
        class and the parameters the batch covers); else the scalar path does."""

    def state(self, controller: Controller, resources: tuple[str, ...]) -> list[float]:
        """What a batch reads of ``controller``'s state and parameters, as numbers (a column
        of :attr:`Batch.state`)."""

    def live(self, controllers: Sequence[Controller], resources: tuple[str, ...]
             ) -> list[list[float]]:
        """Per controller, ``state(controller, resources)[fixed:]``: the part of the state a
        period moves."""

    def decide(self, controllers: Sequence[Controller], batch: Batch) -> BatchDemand:
        """Every row's demand (row ``i`` is ``controllers[i]``'s application), moving each
        controller's state as its scalar :meth:`~merkat.control.base.Controller.decide`
        would."""

    def one(self, controller: Controller, fixed: Sequence[float], ctx: Rows, balance: float,
            nvms: float, work: float, rate: float, ideal: float, perf: float | None,
            bids: Sequence[float], allocs: Sequence[float]) -> Row:
        """One application's decision (the plain form, Python floats): ``controller``'s, with
        ``fixed`` its :class:`Rows` ``fixed`` entry, ``ctx`` the period's values (its
        ``time``, ``period``, ``resources``, ``prices``, ``bid_min``; its ``rows`` unread) and
        the rest one :class:`Rows` row's values as :func:`metrics_row` reads them (``work``
        left, never negative, NaN as 0; ``rate``, ``ideal``: NaN when not reported; ``bids``,
        ``allocs``: per resource). Returns
        :data:`Row`, and moves ``controller``'s state as its scalar
        :meth:`~merkat.control.base.Controller.decide` would, only once nothing can raise any
        more: a row that raises moves nothing (the caller declines it). The same bits as
        :meth:`decide` on that row (``tests/test_batched_plain.py``)."""


Row = tuple[str | None, bool, list[float] | None]
"""One application's decision by :meth:`BatchedPolicy.one`: the stop reason (None: it goes
on), whether it suspends (:data:`SUSPEND`) and its VMs' one bid (per resource of the batch, in
its order; None: declined, the scalar path decides and the controller was not moved)."""

DECLINED: Row = (None, False, None)
"""The :data:`Row` of an application a form does not decide (the scalar path does)."""


class PlainRows:
    """A batched form's :meth:`decide_rows` from its :meth:`BatchedPolicy.one` (the forms'
    base)."""

    def decide_rows(self, controllers: Sequence[Controller], rows: Rows) -> BatchDemand:
        """:meth:`BatchedPolicy.one` row by row (:func:`decide_rows`)."""
        return decide_rows(self, controllers, rows)  # type: ignore[arg-type]


def decide_rows(policy: BatchedPolicy, controllers: Sequence[Controller], rows: Rows
                ) -> BatchDemand:
    """The plain form of ``policy`` on a group: :meth:`BatchedPolicy.one` row by row, a row
    that raises declined (its controller not moved: the scalar path decides for it). The same
    demands and state changes as :meth:`BatchedPolicy.decide` on ``batch_of(rows, live)``, row
    by row (``tests/test_batched_plain.py``)."""
    R = len(rows.resources)
    one = policy.one
    stops: list[str | None] = []
    suspend: list[bool] = []
    values: list[list[float]] = []
    declined: list[bool] = []
    for c, row, fx in zip(controllers, rows.rows, rows.fixed, strict=True):
        balance, nvms, work, rate, ideal, _ = metrics_row(row, 0.0, 0.0)
        try:
            stop, susp, new = one(c, fx, rows, balance, nvms, work, rate, ideal,
                                  row[6], row[7:7 + R], row[7 + R:7 + 2 * R])  # type: ignore[arg-type]
        except Exception:  # (a bug of the form, or the scalar re-split's): the scalar path
            stop, susp, new = DECLINED
        stops.append(stop)
        suspend.append(susp)
        values.append([] if new is None else new)
        declined.append(new is None)
    return BatchDemand(stops, suspend, None, declined=declined, values=values)


BATCHED: Registry[BatchedPolicy] = Registry("batched policy")
"""The batched forms, by the name of the policy they batch (``control/registry.py``'s
``POLICIES``)."""


def gap(v: FloatArray, ref: FloatArray) -> FloatArray:
    """:func:`~merkat.control.formulas.gap` row-wise."""
    zero = np.where(v == 0, 0.0, np.inf)
    inf = np.where(v == ref, 0.0, 1.0)
    plain = np.abs((ref - v) / ref)
    return np.where(ref == 0, zero, np.where(np.isinf(ref), inf, plain))


def spend_cap(b: Batch, left: FloatArray, horizon: FloatArray) -> FloatArray:
    """:meth:`Controller.vm_bid_max <merkat.control.base.Controller.vm_bid_max>` row-wise:
    the spend limit (:func:`~merkat.control.formulas.spend_limit`, ``left`` the time to
    deadline) shared by the VMs, rounded down to the micro-credit."""
    periods = np.ceil(left / b.period)
    periods = np.where(left > 0, np.where(periods > 1.0, periods, 1.0), horizon)
    bal = np.where(b.balance > 0.0, b.balance, 0.0)
    limit = pymin(bal, (bal + b.renewal * (periods - 1)) / periods)
    nvms = np.where(b.nvms > 1.0, b.nvms, 1.0)
    out: FloatArray = np.floor(limit * 1e6 / nvms) / 1e6
    return out


# --- the plain forms' element-wise helpers (Python floats, numpy's results) -------------------


def metrics_row(row: Sequence[Any], deadline: float, now: float
                ) -> tuple[float, float, float, float, float, float]:
    """One gathered row's (:class:`Rows`) balance, VM count, work left (``Metrics.work_left``:
    never negative, NaN as 0, the numpy forms' ``work``), progress rate and ideal rate (NaN:
    not reported) and time to deadline, on Python floats."""
    balance, nvms, done, total, rate, ideal = row[:6]
    work = (math.nan if total is None else total) - (math.nan if done is None else done)
    if not work > 0.0:
        work = 0.0
    return (balance, nvms, work, math.nan if rate is None else rate,
            math.nan if ideal is None else ideal, deadline - now)


def need_row(work: float, ideal_rate: float, left: float) -> float:
    """:func:`~merkat.control.deadline.needed_fraction` as the numpy forms compute it, on
    Python floats: the ideal time left (infinite without a positive ideal rate, NaN without
    one) over the time to deadline (infinite once it has passed, 0 with no work)."""
    ideal = math.inf if ideal_rate <= 0 else work / ideal_rate
    return (math.inf if ideal > 0 else 0.0) if left <= 0 else ideal / left


def spend_cap_row(balance: float, renewal: float, nvms: float, left: float, period: float,
                  horizon: float) -> float:
    """:func:`spend_cap` of one row on Python floats (``period`` > 0, ``horizon`` >= 1, ``left``
    not NaN: a finite deadline). ``np.ceil``/``np.floor`` are written as floor divisions by 1
    where the value is finite (exact: a float's integer part is a float), and, for the floor,
    not zero (numpy keeps the zero's sign); a ceiling of at most 1 is replaced by 1 anyway."""
    if left > 0:
        periods = left / period
        if periods - periods == 0:
            periods = -(-periods // 1.0)  # np.ceil
        if not periods > 1.0:
            periods = 1.0
    else:
        periods = horizon
    bal = balance if balance > 0.0 else 0.0
    x = (bal + renewal * (periods - 1)) / periods
    y = (x if x < bal else bal) * 1e6 / (nvms if nvms > 1.0 else 1.0)
    if y != 0 and y - y == 0:
        y = y // 1.0  # np.floor
    return y / 1e6


def gap_row(v: float, ref: float) -> float:
    """:func:`gap` of one row on Python floats."""
    if ref == 0:
        return 0.0 if v == 0 else math.inf
    if ref - ref != 0 and ref == ref:  # an infinite reference
        return 0.0 if v == ref else 1.0
    return abs((ref - v) / ref)
