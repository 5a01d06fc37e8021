"""How far a market run's allocations are from Dominant Resource Fairness, period by period.

:class:`DrfGap` is fed each period's platform (after the period's decision) by the trace
run's hooks when ``MarketConfig.fairness`` is set (``slo-fig2 --market drf``). For every
application holding VMs with an allocation, its *demand* is its VMs' size summed (CPU and
memory) and its *dominant share* is ``max_r allocated_r / capacity_r``; the DRF reference is
continuous progressive filling of the same demands on the cluster's capacity
(:func:`merkat.market.drf.progressive_filling`, Ghodsi et al.). Per period:

- ``gap``: ``sum_i |s_i - s_i^DRF| / sum_i s_i^DRF`` (0: the market allocated exactly as DRF);
- ``below_half``: the fraction of applications with less than half their DRF dominant share.

:meth:`DrfGap.summary` averages them over the periods with at least one such application.
Reads the platform, never changes it: the run's results are the same with or without it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from merkat.control.types import VMState
from merkat.core.model import PeriodRecord
from merkat.core.period import Platform
from merkat.market.drf import progressive_filling
from merkat.market.types import RESOURCES

_HOLDING = (VMState.RUNNING, VMState.MIGRATING)


class DrfGap:
    """Accumulates the per-period distance to DRF (see the module docstring)."""

    def __init__(self) -> None:
        self.gaps: list[float] = []
        self.below: list[float] = []

    def observe(self, platform: Platform, record: PeriodRecord) -> None:
        capacity = np.array([record.capacity.get(r, 0.0) for r in RESOURCES])
        demand, alloc = [], []
        for app in platform.apps.values():
            held = [vm for vm in app.records() if vm.state in _HOLDING]
            if not held:
                continue
            size = app.spec.vm_size
            demand.append([len(held) * float(size.get(r, 0.0)) for r in RESOURCES])
            alloc.append([sum(float(vm.alloc.get(r, 0.0)) for vm in held) for r in RESOURCES])
        if not demand or (capacity <= 0).any():
            return
        d, a = np.array(demand), np.array(alloc)
        drf = progressive_filling(capacity, d) * (d / capacity).max(axis=1)
        mine = (a / capacity).max(axis=1)
        total = float(drf.sum())
        if total <= 0:
            return
        self.gaps.append(float(np.abs(mine - drf).sum()) / total)
        self.below.append(float((mine < 0.5 * drf).mean()))

    def summary(self) -> dict[str, Any]:
        """``drf_gap`` and ``below_half_drf_pct`` (means over the periods observed), and the
        number of periods."""
        n = len(self.gaps)
        return {
            "drf_gap": float(np.mean(self.gaps)) if n else 0.0,
            "below_half_drf_pct": 100.0 * float(np.mean(self.below)) if n else 0.0,
            "drf_periods": n,
        }
