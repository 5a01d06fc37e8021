"""The batch's data and interface (:class:`Batch`, :class:`BatchDemand`,
:class:`BatchedPolicy`), the registry :data:`BATCHED`, and the element-wise helpers the
batched forms share (Python's ``max``/``min`` rules, the gap, the spend limit). See the
package docstring (:mod:`merkat.control.batched`)."""


from __future__ import annotations

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


@dataclass
class BatchDemand:
    """A batch's demands, one row each: ``declined`` (the batch does not cover this
    application's case: the scalar path decides, the batch moved none of its state), else
    ``stop`` (the reason, or None), else ``suspend`` (suspend every VM, :data:`SUSPEND`), else
    every VM bids ``bid`` (``(R, n)``, the batch's resources) and the VM count is unchanged."""

    stop: list[str | None]
    suspend: list[bool]
    bid: FloatArray
    declined: list[bool] | None = None


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
