"""The simulated backend's rigid applications at a kept pace, advanced together.

:meth:`SimBackend.advance <merkat.backends.sim.SimBackend.advance>` keeps a rigid
application's pace (its slowest VM's speed) while none of its VMs changes: every VM ready, none
migrating, the same allocation mappings. Such an application progresses from ``t0`` to ``t1``
at that pace from ``t0`` on, which is the tail of ``SimBackend._advance_rigid`` with
``begin = t0``::

    usable = max(0.0, t1 - t0)
    left = work_total - work_done
    if rate > 0 and rate * usable >= left:   # it finishes in this interval
        finish_time = t0 + left / rate; work_done = work_total
    else:
        work_done += rate * usable
    last_rate = rate * usable / (t1 - t0)

:func:`advance_paced` does it for all of them at once, without the per-application call, VM
list and dispatch of the general path: a group of at least :data:`MIN_VECTOR` applications in
one numpy pass over their ``work_done``/``work_total`` (each element the same IEEE operations
in the same order as the scalar lines above, so the same bits), a smaller one in a plain loop
of those lines. ``tests/test_sim_pace.py`` pins both against the recomputed reference, bit
for bit.

A quiet CPU-only application whose pace is lost (a new allocation) takes it again from its
least CPU allocation; :func:`least_cpu` takes every application's at once from the plan's
column when it is applied (one ``np.minimum.reduceat`` over the spans, instead of a ``min``
over each application's VMs' mappings at the advance: issue 28, twentieth session), kept
only where it is that ``min`` bit for bit; :data:`LOWS` off is the reference (the ``min``
every time), and ``tests/test_sim_lows.py`` compares both runs state for state.

A rigid application that lost its pace (a new allocation mapping, a VM put or released) and
is quiet again at ``t0`` (every VM ready, none migrating, CPU only: the first branch of
``SimTime._rigid_pace``) takes its pace and joins the pass in the very advance that finds it
so (:func:`join_quiet`, issue 28, twenty-fifth session), instead of one ``_advance_rigid``
and ``_rigid_pace`` call each before it joins the next advance's pass: its advance from
``t0`` is the pass's lines, bit for bit. :data:`FOLD` off is the reference (each advanced by
``_advance_rigid``); ``tests/test_sim_fold.py`` runs both ways, state for state.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence, Sized
from typing import Any, Protocol

import numpy as np

from merkat.backends.sim_models import RigidApp
from merkat.core.backend import AllocColumn


class Progress(Protocol):
    """What the pass reads and writes of a rigid application (``RigidApp``)."""

    work_done: float
    work_total: float
    finish_time: float | None
    last_rate: float | None

MIN_VECTOR = 4096
"""The smallest group advanced in one numpy pass. Measured on ``advance_paced`` alone
(CPython 3.11, issue 28, twenty-fifth session): the loop costs ~1.6 K instructions and
~170-320 ns an application at every size; the pass ~50 K instructions whatever its size
plus ~1.7 K an application (its gathers, ``tolist`` and write-back are Python too), the two
even at ~2,400 applications in process time and never below it in instructions. No group
of the trace windows or themis-fig5 comes near (was 32, set by wall time when the pass was
first written)."""


def advance_paced(models: Sequence[Progress], rates: Sequence[float],
                  t0: float, t1: float) -> list[int]:
    """Advance each of ``models`` from ``t0`` to ``t1`` at its kept pace ``rates[k]`` (>= 0),
    from ``t0`` on: the module docstring's lines. Returns the positions of those that
    finished. (``t1 == t0`` raises ``ZeroDivisionError``, as the scalar lines do.)"""
    usable = max(0.0, t1 - t0)
    span = t1 - t0
    finished: list[int] = []
    if len(models) < MIN_VECTOR or span == 0.0:
        for k, (model, rate) in enumerate(zip(models, rates, strict=True)):
            left = model.work_total - model.work_done
            step = rate * usable
            if rate > 0 and step >= left:
                model.finish_time = t0 + left / rate
                model.work_done = model.work_total
                finished.append(k)
            else:
                model.work_done += step
            model.last_rate = step / span
        return finished
    n = len(models)  # (np.fromiter of a known count: no shape discovery, ~70 instructions
    # an element fewer than np.array; the same float64 of each value)
    pace = np.fromiter(rates, float, n)
    done = np.fromiter([m.work_done for m in models], float, n)
    total = np.fromiter([m.work_total for m in models], float, n)
    steps = pace * usable
    left = total - done
    finishing = (pace > 0) & (steps >= left)
    for model, d, r in zip(models, (done + steps).tolist(), (steps / span).tolist(),
                           strict=True):
        model.work_done = d
        model.last_rate = r
    if finishing.any():
        lefts = left.tolist()
        finished = np.flatnonzero(finishing).tolist()
        for k in finished:
            model = models[k]
            model.finish_time = t0 + lefts[k] / rates[k]
            model.work_done = model.work_total
    return finished


LOWS = True
"""Whether :meth:`SimBackend.apply <merkat.backends.sim.SimBackend.apply>` keeps each rigid
application's least CPU allocation from a plan's column (:func:`least_cpu`); False: every
quiet pace takes the least of its VMs' mappings (the reference)."""


HANDED = True
"""Whether :func:`least_cpu` reads the least values the plan handed over in its column
(``AllocColumn.lows``: the same ``np.minimum.reduceat`` over the same values and spans,
taken once for the controllers and the backend; issue 28, twenty-second session); False:
it takes them itself every time (the reference)."""


def least_cpu(column: AllocColumn, listed: int, groups: Mapping[str, Sized],
              out: dict[str, float]) -> None:
    """Each application's least CPU allocation, from a plan's
    :class:`~merkat.core.backend.AllocColumn` just applied, into ``out``: one
    ``np.minimum.reduceat`` over the column's spans instead of a ``min`` over each
    application's VMs' mappings at every advance (issue 28, twentieth session).

    Kept for an application only where it is that ``min``, bit for bit: the column is of
    ``"cpu"`` and lists as many VMs as the plan's ``allocations`` (``listed``: a plan whose
    allocations were filtered keeps no column of them), the application's span is every VM
    the backend holds of it (``groups[app]``, its VMs, as many as the span's: the plan's
    listed VMs of it, just given their mappings, are among them), and the
    least is neither NaN (numpy's ``minimum`` propagates one, Python's ``min`` keeps it only
    first) nor a zero (``min`` keeps the first of ``0.0`` and ``-0.0``); every VM of the
    span holds ``{"cpu": v}`` with ``v == values[m]``, and equal floats other than zeros
    are the same bits. The others are left out (the backend takes the ``min`` then). The
    caller drops an application's entry whenever one of its VMs is put, released or given
    another mapping (:meth:`SimBackend._unpace <merkat.backends.sim.SimBackend._unpace>`,
    ``apply``). The least values are the column's ``lows`` when the plan handed them over
    (:data:`HANDED`), else taken here."""
    sizes, starts = column.sizes, column.starts
    values = column.values
    if (column.resource != "cpu" or not starts or 0 in sizes or listed != len(values)
            or starts[-1] + sizes[-1] != listed):
        return
    lows = column.lows
    if lows is None or not HANDED:
        lows = np.minimum.reduceat(values, starts).tolist()
    for app, low, size in zip(column.apps, lows, sizes, strict=True):
        if low == low and low != 0.0:
            group = groups.get(app)
            if group is not None and len(group) == size:
                out[app] = low


FOLD = True
"""Whether :meth:`SimBackend.advance <merkat.backends.sim.SimBackend.advance>` moves the
quiet rigid applications of its live set into the pass before it (:func:`join_quiet`);
False: each is advanced by ``SimTime._advance_rigid`` (the reference)."""


def quiet_rate(model: RigidApp, vms: Iterable[Any], app_id: str, quiet: Mapping[str, float],
               lows: Mapping[str, float], trade_memory: bool, t0: float) -> float | None:
    """The first branch of ``SimTime._rigid_pace``: ``min(1.0, least / cpu)`` for an
    application of CPU only (``cpu > 0``, no memory traded) quiet by ``t0`` (``quiet[app_id]
    <= t0``: every VM ready, none migrating), ``least`` its least CPU allocation (``lows``'s,
    else the ``min`` over ``vms``' mappings in their order); None when that branch does not
    answer (not quiet, or the quotient NaN or a zero, whose ``min`` the general loop
    decides). Division by a positive number keeps the order, so this is the rate of the
    first least CPU allocation, as the general loop gives it."""
    full = model.cpu
    if (trade_memory and model.memory > 0) or not full > 0 \
            or not quiet.get(app_id, math.inf) <= t0:
        return None
    low = lows.get(app_id)  # (least_cpu's: the same bits)
    if low is None:
        low = min([vm.alloc.get("cpu", 0.0) for vm in vms])
    cpu = low / full
    if cpu == cpu and cpu != 0.0:
        return cpu if cpu < 1.0 else 1.0
    return None


def join_quiet(live: dict[str, None], apps: Mapping[str, object],
               groups: Mapping[str, Mapping[str, Any]], quiet: Mapping[str, float],
               lows: Mapping[str, float], trade_memory: bool, t0: float,
               pace: dict[str, float]) -> None:
    """Move from ``live`` into ``pace`` (id: kept pace) each unfinished :class:`RigidApp`
    that ``SimTime._advance_rigid`` would advance by the first branch of ``_rigid_pace``
    (:func:`quiet_rate`) and keep at that pace: all its VMs there (``groups[app]``, at
    least its ``vms``, one or more) and the pace not negative. Advanced from ``t0`` in
    :func:`advance_paced`'s pass, such an application gets the scalar path's bits (the
    module docstring); the others stay in ``live`` for it. The backend's speed must be
    ``SimTime._speed`` (the caller checks)."""
    moved: list[str] = []
    for app_id in live:
        model = apps.get(app_id)
        if type(model) is not RigidApp or model.finish_time is not None:
            continue
        group = groups.get(app_id)
        if not group or len(group) < model.vms:
            continue
        rate = quiet_rate(model, group.values(), app_id, quiet, lows, trade_memory, t0)
        if rate is not None and rate >= 0.0:
            pace[app_id] = rate
            moved.append(app_id)
    for app_id in moved:
        del live[app_id]
