"""The simulated backend's allocations read from a plan's column
(:class:`~merkat.core.backend.AllocationColumn`) instead of its per-VM mapping.

:meth:`SimBackend.apply <merkat.backends.sim.SimBackend.apply>` gives each VM of a plan its
allocation mapping (kept when it is the same object) and forgets the kept pace of each
application one of whose VMs got a new one; it did so in a Python loop over the plan's
``allocations``, one dictionary look-up, test and write per VM. :func:`apply_column` does the
same from the column in passes at C speed (``map`` over the VMs in market order, ``compress``
to the changed ones), and also gives each application's least allocation of the column's
resource, one ``np.minimum.reduceat`` over the column's values, which
``SimBackend._rigid_pace`` takes instead of a ``min`` over the application's VMs (a CPU-only
rigid application's pace while its VMs are quiet). ``tests/test_sim_columns.py`` runs the two
paths side by side, state for state after every period.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, MutableMapping
from itertools import chain, compress, repeat
from operator import attrgetter, is_not
from typing import Any, Protocol

import numpy as np

from merkat.core.backend import AllocationColumn


class HeldVM(Protocol):
    """What the pass reads and writes of a simulated VM (``merkat.backends.sim._VM``)."""

    app: str
    alloc: Mapping[str, float]


_ALLOC = attrgetter("alloc")
_APP = attrgetter("app")
_NONE: dict[str, Any] = {}


def apply_column(vms: Mapping[str, HeldVM], column: AllocationColumn,
                 pace: MutableMapping[str, float], live: MutableMapping[str, None],
                 groups: Mapping[str, Mapping[str, Any]] | None
                 ) -> dict[str, float]:
    """Give each VM ``column.vms[m]`` of ``vms`` the mapping ``column.allocs[m]`` (kept when
    it holds that object already; ``KeyError`` for a VM not in ``vms``, as the per-VM loop),
    and forget the kept ``pace`` of each application one of whose VMs got a new mapping (it
    goes back to ``live``, in the order the per-VM loop sends them). Returns each
    application's least value of the column, a Python float, for the applications whose VMs
    in ``vms`` are exactly the column's (``groups``: the VMs of each application, ``vms``
    grouped; None when that grouping is not current: then none), and none when an
    application's VMs are not contiguous in the column, an application appears twice or
    has none in it."""
    held = list(map(vms.__getitem__, column.vms))
    allocs = column.allocs
    owners = list(map(_APP, held))
    new = list(map(is_not, map(_ALLOC, held), allocs))
    if any(new):
        deque(map(setattr, compress(held, new), repeat("alloc"), compress(allocs, new)), 0)
        for app in dict.fromkeys(compress(owners, new)):
            if pace.pop(app, None) is not None:
                live[app] = None
    apps, counts = column.apps, column.counts
    if (groups is None or not apps or 0 in counts or len(set(apps)) != len(apps)
            or owners != list(chain.from_iterable(map(repeat, apps, counts)))):
        return {}
    starts = np.cumsum([0, *counts[:-1]])
    lows: list[float] = np.minimum.reduceat(column.values, starts).tolist()
    sizes = list(map(len, map(groups.get, apps, repeat(_NONE))))
    if sizes == list(counts):
        return dict(zip(apps, lows, strict=True))
    return {a: low for a, low, n, k in zip(apps, lows, sizes, counts, strict=True) if n == k}


def pace_from_lows(lows: Mapping[str, float], live: MutableMapping[str, None],
                   pace: MutableMapping[str, float], models: Mapping[str, Any],
                   groups: Mapping[str, Mapping[str, Any]], quiet: Mapping[str, float],
                   t0: float, trade_memory: bool) -> None:
    """Move to ``pace`` (out of ``live``) each live rigid application whose least CPU
    allocation ``lows`` gives and whose VMs are quiet from ``t0`` on (``quiet``), at the
    rate ``SimBackend._advance_rigid`` would find and keep for it: the quick branch of
    ``SimBackend._rigid_pace`` (CPU only, all its VMs ready and none migrating: the rate is
    ``min(1.0, low / cpu)`` from ``t0``), kept when not NaN, not a zero and not negative.
    Advanced then with the others at a kept pace (``sim_pace.advance_paced``: the same
    arithmetic as ``_advance_rigid``'s with ``begin = t0``), in one pass instead of a call,
    a VM list and a ``min`` per application. Only for a backend whose ``_speed`` is
    ``SimBackend``'s (the caller checks)."""
    from merkat.backends.sim_models import RigidApp

    inf = math.inf
    for app_id, low in lows.items():
        if app_id not in live:
            continue
        model = models.get(app_id)
        if type(model) is not RigidApp or model.finish_time is not None:
            continue
        full = model.cpu
        if (trade_memory and model.memory > 0) or not full > 0:
            continue
        if not quiet.get(app_id, inf) <= t0:
            continue
        group = groups.get(app_id)
        if not group or len(group) < model.vms:
            continue
        cpu = low / full
        if cpu == cpu and cpu != 0.0:
            rate = cpu if cpu < 1.0 else 1.0
            if rate >= 0.0:
                pace[app_id] = rate
                del live[app_id]
