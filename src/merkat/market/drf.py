"""Dominant Resource Fairness: the reference (Ghodsi et al., NSDI 2011) and a DRF-aware market.

Pure: no I/O, no clock. Capacities and demands are per resource in the order of
:data:`merkat.market.types.RESOURCES` (any number of columns works).

- :func:`progressive_filling_tasks` — DRF on discrete tasks (Ghodsi et al., Algorithm 1): the
  user with the lowest dominant share launches one more task while it fits; a user whose next
  task does not fit is saturated and the others go on. The paper's example (9 CPUs, 18 GB;
  A <1 CPU, 4 GB>, B <3 CPUs, 1 GB>) gives A 3 tasks and B 2.
- :func:`progressive_filling` — the continuous version, with demands as caps: every user's
  dominant share rises at the same rate; a user stops when it has its whole demand or when a
  resource it uses is exhausted. What the fairness columns of ``slo-fig2 --market drf``
  compare the markets with.
- :func:`bundle_share` — the DRF-aware market's rule (``--market drf``,
  :class:`merkat.market.mechanisms.DRFBundles`): each VM bids one amount for a *bundle*, its
  size in every resource (its cap; at most the capacity), and receives a fraction x of that
  bundle, the same on every resource, so the proportions of its VM are kept. The price is per
  unit of dominant share: a VM whose bundle's dominant share is d and bids b gets
  ``x = min(1, b / (p d))``, with p the lowest price at which no resource is over-subscribed
  (0 when every bundle fits whole). A VM never pays more than its bid (p x d <= b), and pays
  exactly its bid when it gets less than its whole bundle.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

_EPS = 1e-12
_TINY = 1e-12
"""A bundle whose dominant share is at most this counts as empty (it gets nothing): below it,
bid / dominant share overflows."""


def _dominant(demand: FloatArray, capacity: FloatArray) -> FloatArray:
    """Each row's dominant share of ``capacity`` (a positive demand on a resource of zero
    capacity is infinitely dominant)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(demand > 0, demand / capacity[None, :], 0.0)
    share = np.where(np.isnan(share), np.inf, share)
    out: FloatArray = share.max(axis=1) if share.shape[1] else np.zeros(len(demand))
    return out


def progressive_filling_tasks(capacity: npt.ArrayLike, demands: npt.ArrayLike,
                              max_tasks: npt.ArrayLike | None = None) -> npt.NDArray[np.int64]:
    """Tasks per user under DRF (Ghodsi et al., Algorithm 1), ``demands[i]`` one task's
    resources; ``max_tasks[i]`` bounds user i's tasks (default: as many as fit). Ties of
    dominant share go to the user listed first."""
    cap = np.asarray(capacity, dtype=np.float64)
    dem = np.asarray(demands, dtype=np.float64)
    n = len(dem)
    limit = np.full(n, np.iinfo(np.int64).max) if max_tasks is None \
        else np.asarray(max_tasks, dtype=np.int64)
    if (cap < 0).any() or (dem < 0).any():
        raise ValueError("capacity and demands must be >= 0")
    if n and (dem.sum(axis=1) <= 0).any():
        raise ValueError("every user's task must demand some resource")
    used = np.zeros_like(cap)
    tasks = np.zeros(n, dtype=np.int64)
    dom = _dominant(dem, cap) if n else np.zeros(0)
    active = [i for i in range(n) if limit[i] > 0]
    while active:
        i = min(active, key=lambda u: (tasks[u] * dom[u], u))
        if (used + dem[i] <= cap * (1 + _EPS)).all():
            used += dem[i]
            tasks[i] += 1
            if tasks[i] >= limit[i]:
                active.remove(i)
        else:
            active.remove(i)  # saturated: its next task does not fit
    return tasks


def progressive_filling(capacity: npt.ArrayLike, demands: npt.ArrayLike) -> FloatArray:
    """The fraction of its demand each user gets under continuous DRF: the users' dominant
    shares rise together; a user stops at its whole demand or when a resource it demands is
    exhausted. A user demanding nothing gets 1 (all of nothing)."""
    cap = np.asarray(capacity, dtype=np.float64)
    dem = np.asarray(demands, dtype=np.float64)
    n = len(dem)
    frac = np.zeros(n)
    if n == 0:
        return frac
    dom = _dominant(dem, cap)
    nothing = dem.sum(axis=1) <= 0
    frac[nothing] = 1.0
    active = ~nothing & np.isfinite(dom)
    level = 0.0  # the common dominant share of the active users
    used = np.zeros_like(cap)
    while active.any():
        idx = np.flatnonzero(active)
        rate = (dem[idx] / dom[idx, None]).sum(axis=0)  # use per unit of dominant share
        left = cap - used
        with np.errstate(divide="ignore", invalid="ignore"):
            to_full = np.where(rate > 0, left / rate, np.inf)
        step_res = float(to_full.min()) if to_full.size else np.inf
        step_dem = float((dom[idx] - level).min())
        step = max(0.0, min(step_res, step_dem))
        level += step
        used = used + step * rate
        frac[idx] = level / dom[idx]
        done = dom[idx] <= level * (1 + 1e-12)
        exhausted = to_full <= step * (1 + 1e-12)
        blocked = (dem[idx][:, exhausted] > 0).any(axis=1) if exhausted.any() \
            else np.zeros(len(idx), dtype=bool)
        stop = done | blocked
        if not stop.any():  # numerical guard: nothing moved
            break
        active[idx[stop]] = False
    return np.minimum(frac, 1.0)


def bundle_share(bid: npt.ArrayLike, bundle: npt.ArrayLike,
                 capacity: npt.ArrayLike) -> tuple[FloatArray, float]:
    """The DRF-aware market on one pool: ``(x, p)``, each VM's fraction of its ``bundle``
    (rows: per resource, capped at ``capacity``) and the price per unit of dominant share.

    ``bid[i]`` is VM i's bid for its whole bundle (credits per period). A VM bidding nothing,
    with an empty bundle (dominant share <= 1e-12), or needing a resource of zero capacity
    gets nothing. The price is
    the lowest at which every resource's demand ``sum_i x_i bundle[i, r]`` is within its
    capacity (exact: the capped set is a prefix of the VMs sorted by ``b / d``)."""
    b = np.asarray(bid, dtype=np.float64)
    cap = np.asarray(capacity, dtype=np.float64)
    a = np.minimum(np.asarray(bundle, dtype=np.float64), cap[None, :])
    n = len(b)
    x = np.zeros(n)
    if n == 0:
        return x, 0.0
    d = _dominant(a, cap)
    ok = (b > 0) & (d > _TINY) & np.isfinite(d)
    idx = np.flatnonzero(ok)
    if idx.size == 0:
        return x, 0.0
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(cap > 0, a[idx] / cap[None, :], 0.0)  # share of each resource
    if (per.sum(axis=0) <= 1 + _EPS).all():
        x[idx] = 1.0
        return x, 0.0
    t = b[idx] / d[idx]  # VM i is capped (x = 1) iff p <= t_i
    order = np.argsort(-t, kind="stable")
    t_sorted, per_sorted = t[order], per[order]
    unc = (b[idx] / d[idx])[order, None] * per_sorted / 1.0  # b_i a_ir / (d_i C_r)
    m = len(order)
    zeros = np.zeros((1, per.shape[1]))
    capped_load = np.vstack([zeros, np.cumsum(per_sorted, axis=0)])  # K(k), k capped
    unc_total = unc.sum(axis=0)
    unc_load = unc_total[None, :] - np.vstack([zeros, np.cumsum(unc, axis=0)])  # U(k)
    price = np.inf
    for k in range(m + 1):
        room = 1.0 - capped_load[k]
        if (room < -_EPS).any():
            break  # the k first whole bundles already over-subscribe a resource
        with np.errstate(divide="ignore", invalid="ignore"):
            need = np.where(unc_load[k] > 0, unc_load[k] / np.maximum(room, 0.0), 0.0)
        pk = float(need.max())
        upper = t_sorted[k - 1] if k > 0 else np.inf
        lower = t_sorted[k] if k < m else 0.0
        if lower <= pk * (1 + 1e-12) and pk <= upper * (1 + 1e-12):
            price = pk
            break
    if not np.isfinite(price) or price <= 0:  # guard: bisect on the load
        price = _bisect_price(b[idx], d[idx], per)
    xs = np.minimum(1.0, b[idx] / (price * d[idx]))
    load = (xs[:, None] * per).sum(axis=0).max()
    if load > 1.0:  # rounding: never more than the capacity
        xs = xs / load
    x[idx] = xs
    return x, price


def _bisect_price(b: FloatArray, d: FloatArray, per: FloatArray) -> float:
    lo, hi = 0.0, float((b / d).max()) * 2 + 1.0
    while float((np.minimum(1.0, b / (hi * d))[:, None] * per).sum(axis=0).max()) > 1.0:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        load = float((np.minimum(1.0, b / (mid * d))[:, None] * per).sum(axis=0).max())
        lo, hi = (mid, hi) if load > 1.0 else (lo, mid)
    return hi
