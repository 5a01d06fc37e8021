"""The tabu search's shortcuts for the usual market (:mod:`merkat.market.balance_state`).

What they replace, each giving the general path's bits (``tests/test_market_balance.py``
runs random searches both ways, :data:`~merkat.market.balance_state.FAST_PATHS` on and off,
and compares every mapping, error and count; the golden digests and ``themis-fig5``'s
``results.json`` pin the whole runs):

- **the destination's estimates kept per VM class** (``Shortcuts.kept``, used by
  :func:`~merkat.market.balance_loop.usual_loop`): a VM's
  estimated error on every node depends only on its bid, cap and ideal share and on each
  node's uncapped bids and capacity left; a move changes those of two nodes. VMs of one
  application share their class, so most estimates of a search were already computed for an
  earlier VM of the class: they are kept (one array per class) and only the nodes moved
  since are recomputed, in Python floats with numpy's operations (``b * cl / (bu + b)``,
  ``minimum`` keeping NaN, ``|1 - ideal / est|``, ``ERROR_LIMIT`` where ``est`` is not
  positive), instead of ~10 numpy calls over every node. Taken when one resource makes
  errors, it is traded, every node has it and no VM has a minimum (the other searches take
  the general path);
- **the candidates' exact errors in O(1) per node** (in ``usual_loop``'s destination): when no VM
  of a candidate node would be capped with the VM added, the water-filling's first step is
  its answer (:func:`~merkat.market.share.first_share_of_added`, inlined with
  :func:`~merkat.market.allocation_error.rel_error`); above ``_SMALL`` VMs the general path
  clears the candidates as one segmented market, whose running sums cross the nodes, and
  the first step is still its answer while those sums stay finite (each node's first
  position subtracts its own running sum from itself: :data:`SAFE_SUM`);
- **a moved pair's clearing without sorting** (:meth:`Shortcuts.pair_shares`): the same
  first step for both nodes of a move, from their kept sums and largest bid per unit of cap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from merkat.market.allocation_error import ERROR_LIMIT
from merkat.market.share import _RTOL, _TINY
from merkat.market.types import FloatArray

SAFE_SUM = 1e300
"""Bids (or finite caps) summing below this keep every running sum of a segmented clearing
finite: non-negative terms, so no prefix exceeds the total."""

STALE = 24
"""A kept estimate array with more nodes changed since it was computed than this is
computed again in numpy (cheaper than that many updates in Python)."""

_LIMIT = 1.0 + _RTOL
_INF = math.inf


def lowest(score: FloatArray, k: int) -> list[int]:
    """The nodes of the ``k`` lowest scores (``argpartition``'s choice among ties), those
    with a finite score, ascending. (A ``partition`` of the values finds the same nodes
    when nothing ties with the ``k``-th, but on the searches of ``bench period`` and
    themis-fig5 52-89 % of the calls have such a tie: ``argpartition`` stays.)"""
    cands = score.argpartition(k - 1)[:k] if k < score.size else np.arange(score.size)
    vals: list[float] = score[cands].tolist()
    nodes = sorted(h for h, x in zip(cands.tolist(), vals, strict=True) if -_INF < x < _INF)
    if not nodes:
        raise ValueError("no candidate destination with a finite estimate")
    return nodes


def first_step(total: float, capacity: float) -> tuple[float, float, float]:
    """The water-filling's first step on a market of total bid ``total`` (summed left to
    right) and ``capacity``: ``(price, uncapped bids, capacity left)``, each VM uncapped
    then getting ``bid / price`` (:func:`~merkat.market.share.first_share_of_added`'s
    arithmetic: ``max(total - 0.0, 0.0)`` keeping NaN, ``inf`` without capacity)."""
    left_b = total - 0.0
    if left_b < 0.0:
        left_b = 0.0
    left_c = capacity - 0.0
    if left_b <= 0.0:
        return 0.0, left_b, left_c
    return (left_b / left_c if left_c > 0.0 else _INF), left_b, left_c


def errors(shares: list[float], ideals: list[float]) -> list[float]:
    """Per share and ideal share, ``rel_error(share, ideal)`` and then the largest of it
    and 0.0 (the general path's running maximum over one resource), inlined."""
    out: list[float] = []
    for a, i in zip(shares, ideals, strict=True):
        if a > 0:
            e = (a - i) / a
            if e > ERROR_LIMIT or e < -ERROR_LIMIT:
                e = ERROR_LIMIT
            elif e < 0.0:
                e = -e
        else:
            e = ERROR_LIMIT if i > 0 else 0.0
        out.append(e if e > 0.0 else 0.0)
    return out


class Shortcuts:
    """The shortcuts of one search (module docstring); ``s`` is its
    :class:`~merkat.market.balance_state.Search`, prepared; up to ``small`` VMs its general
    path clears a node in plain Python (passed in: this module does not import that one)."""

    def __init__(self, s: Any, small: int) -> None:
        self.s = s
        self.log: list[int] = []  # the nodes each move changed, in order
        self.kept: dict[tuple[float, float, float], list[Any]] = {}
        r = s.err_res[0] if len(s.err_res) == 1 else -1
        self.simple = (r >= 0 and r in s.traded and s.all_have_cap[r] and not s.has_min)
        self.r = r
        # The usual market's terms as Python floats, kept equal to ``s.bu[:, r]`` and
        # ``s.cl[:, r]`` (every write of those two nodes' terms also writes here: the
        # pair's shortcut and :meth:`synced` after the general path), so that updating a
        # kept estimate reads no numpy scalar.
        self.bu_l: list[float] = s.bu[:, r].tolist() if self.simple else []
        self.cl_l: list[float] = s.cl[:, r].tolist() if self.simple else []
        self.small = small  # the general path's plain-Python limit (balance_state._SMALL)
        # per traded resource asked: whether a segmented clearing's running sums stay finite
        # (:meth:`safe`: only a segmented clearing asks; a search with none never computes it)
        self._safe: dict[int, bool] = {}

    def safe(self, q: int) -> bool:
        """Whether traded resource ``q``'s bids, and its finite caps, each sum below
        :data:`SAFE_SUM` over every VM (a segmented clearing's running sums then stay
        finite); computed on the first question, then kept."""
        got = self._safe.get(q)
        if got is None:
            vms = self.s.vms
            got = self._safe[q] = (
                bool(vms.bid[:, q].sum() < SAFE_SUM)
                and bool(np.sum(vms.cap[:, q], where=vms.cap[:, q] < _INF) < SAFE_SUM))
        return got

    def moved(self, src: int, dst: int) -> None:
        """A move changed nodes ``src`` and ``dst``."""
        self.log += (src, dst)

    def synced(self, r: int, nodes: tuple[int, ...]) -> None:
        """The general path wrote resource ``r``'s terms of ``nodes``: copy them."""
        if self.simple and r == self.r:
            s = self.s
            for h in nodes:
                self.bu_l[h] = float(s.bu[h, r])
                self.cl_l[h] = float(s.cl[h, r])

    def move_errors(self, alloc: list[float], m: list[int]) -> list[float]:
        """``Search.move``'s new errors of VMs ``m`` from their allocations ``alloc`` of
        the one resource that makes errors (the usual market only)."""
        ideal_r = self.s.ideal_t[self.r]
        return errors(alloc, [ideal_r[j] for j in m])

    def pair_shares(self, r: int, src: int, dst: int, segmented: bool) -> list[float] | None:
        """``Search._pair_shares(r, src, dst)`` when neither node has a capped VM (and, for a
        segmented clearing, the running sums stay finite), the nodes' terms updated; else
        None, nothing changed."""
        if segmented and not self.safe(r):
            return None
        s = self.s
        sums, rmaxs, cap_r = s.node_sum[r], s.node_rmax[r], s.cap_node[r]
        terms = []
        for h in (src, dst):
            step = first_step(sums[h], cap_r[h])
            if not rmaxs[h] <= step[0] * _LIMIT:
                return None
            terms.append(step)
        out: list[float] = []
        nb = s.node_bids[r]
        kept = self.simple and r == self.r
        for h, (p, left_b, left_c) in zip((src, dst), terms, strict=True):
            s.bu[h, r], s.cl[h, r] = left_b, left_c
            if kept:
                self.bu_l[h], self.cl_l[h] = left_b, left_c
            if not 0.0 < p < _INF:
                out += [0.0] * len(nb[h])
            elif p >= _TINY:
                out += [b / p for b in nb[h]]
            else:
                out += [(b / left_b) * left_c for b in nb[h]]
        if segmented:
            out = [a if -_INF < a < _INF else 0.0 for a in out]
        return out
