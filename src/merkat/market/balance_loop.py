"""The tabu search's loop for the usual market, in one function
(:func:`usual_loop`; :mod:`merkat.market.balance`'s ``_search_loop`` is its reference).

What it replaces: per iteration, ``_search_loop`` calls :meth:`Search.destination
<merkat.market.balance_state.Search.destination>` (which calls the shortcuts'
``candidates`` and ``exact``) and :meth:`Search.move
<merkat.market.balance_state.Search.move>` (``_pair_shares``, the shortcuts'
``pair_shares``, ``move_errors``, ``moved``), ~12 Python calls, ~150 attribute and
dictionary look-ups and ~8 numpy operations of bookkeeping (the VM errors read and written
through index arrays, the mapping written and copied as an array, ``(err > threshold).any()``
at each better mapping). Here the same steps run inline on the search's lists held in local
variables (the general path's methods only where the shortcuts do not hold): the VM
errors read and written one at a time through a view of the search's array (``err_l``,
:func:`~merkat.market.balance_arrays.view`) with a count of those above the threshold, the
mapping through a view of the search's (``host_l``; the best mapping is the start with
the first moves replayed), the node terms as the shortcuts' lists, and of each node only
its members (a moved node's sum of bids and largest bid per unit of cap from the VMs'
columns in its members' order: the values and order of ``Search.move``'s per-node bid and
ratio lists, which the loop does not keep; the general path's methods get those lists
built from the members when they are called, ``lists``); each candidate's share, its error and the first smallest
one in one pass over the candidates, and a move's shares (the shortcuts' ``pair_shares``),
the VMs' new errors (``errors``) and their bookkeeping in one pass over the two nodes'
VMs.

**A candidate with the terms of one answered before is not cleared again.** A candidate's
first-step share, and with it its error, depends only on the moved VM and on the node's sum
of bids, capacity and largest bid per unit of cap (``sums``, ``cap_r``, ``rmaxs``); empty
nodes, and nodes holding the same VMs of one application, share those terms (half of
themis-fig5's candidates repeat the terms of the last candidate the first step answered,
92 % of the repeats next to it in node order). Such a candidate has that candidate's error,
which is not smaller than the best so far, so the first smallest error (``<``) stays the
same: it is skipped. (``==`` on the terms: ``-0.0`` and ``0.0`` give the same share and
error; a NaN term never repeats; a capped candidate cleared by ``share_of_last``, which
reads the node's bids, is never the one compared with.) A set of every answered candidate's
terms finds 8 % more repeats but costs more to hash than it saves (+0.5 % instructions).

What stays numpy, because its bits or its choices are
numpy's: the selection's ``argmax`` over the scores (first of equal maxima), the
candidates' ``argpartition`` (its choice among tied estimates decides the destination),
a class's first estimate over every node, and the two ``np.dot`` sums of squares of a move
(OpenBLAS's FMA order feeds ``rms < best``).

Taken when the shortcuts' usual market holds (one resource makes errors, it is traded, every
node has it, no VM has a minimum: ``Shortcuts.simple``) with Merkat's rule; each step that
the shortcuts cannot answer (a VM bidding nothing, a capped node above ``_SMALL`` VMs, sums
that are not safe) calls the general path's method, as ``Search`` does. The same operations
on the same values in the same order, so the same search: ``tests/test_market_balance.py``
compares it with the general path (``FAST_PATHS`` off) byte for byte on random markets, and
the golden digests and ``themis-fig5``'s ``results.json`` pin whole runs.
"""

from __future__ import annotations

import math
from collections import deque
from typing import Any

import numpy as np

from merkat.market.allocation_error import ERROR_LIMIT
from merkat.market.balance_arrays import view
from merkat.market.balance_fast import STALE, errors, first_step
from merkat.market.share import _RTOL, _TINY, share_of_last
from merkat.market.types import NO_HOST, BalanceParams, IntArray

_LIMIT = 1.0 + _RTOL
_INF = math.inf
_NAN = math.nan


def usual_loop(search: Any, params: BalanceParams, rms0: float) -> tuple[int, IntArray, float]:
    """``_search_loop(search, params, rms0)`` for the usual market (module docstring):
    (iterations, best mapping, its rms). ``search`` is prepared, its shortcuts ``simple``;
    its mapping, errors and migration count are written back when the loop ends."""
    s = search
    f = s.fast
    r = f.r
    start_host = s.host.copy()
    moves: list[tuple[int, int]] = []  # (VM, destination) in order: the best mapping is
    best_n = -1  # the start with the first best_n moves made (-1: the start itself)
    best_rms = rms0
    tabu: deque[int] = deque()
    no_improve = it = 0
    score, is_tabu = s.score, s.is_tabu
    argmax = score.argmax
    sc = view(score)  # (its elements written one at a time: the move's VMs, v, u)
    err_l: Any = view(s.err)  # (written in place: the search's errors)
    initial, host_l = s.initial_l, s.host_l
    threshold, n_placed = params.error_threshold, s.n_placed
    n_over = int(np.count_nonzero(s.err > threshold))
    max_it, max_mig = params.max_iterations, params.max_migrations
    tabu_size, max_no_improve, k_cand = params.tabu_size, params.max_no_improve, params.candidates
    migrations, sumsq = s.migrations, s.sumsq
    # the search's lists, changed in place (never replaced) while the loop runs
    loaded, members, sorted_vms, bounds = s.loaded, s.members, s.sorted_vms, s.bounds
    sums, rmaxs, cap_r = s.node_sum[r], s.node_rmax[r], s.cap_node[r]
    nb, nc = s.node_bids[r], s.node_caps[r]
    bid_r, capv_r, ideal_r, ratio_r = s.bid_t[r], s.cap_t[r], s.ideal_t[r], s.ratio_t[r]

    def lists(h: int) -> None:
        # node h's bids and caps in its members' order, for the general path's methods
        # (the loop itself keeps only the members and reads the VMs' columns)
        if not loaded[h]:
            loaded[h] = True
            members[h] = sorted_vms[bounds[h]:bounds[h + 1]].tolist()
        js = members[h]
        nb[h], nc[h] = [bid_r[j] for j in js], [capv_r[j] for j in js]
    bu_col, cl_col = s.bu_col[r], s.cl_col[r]
    bu_l, cl_l, log, kept = f.bu_l, f.cl_l, f.log, f.kept
    bu_v, cl_v = view(bu_col), view(cl_col)  # (s.bu[:, r], s.cl[:, r] written in place)
    small, safe = f.small, f.safe  # (safe(r): asked only of a segmented clearing)
    n_nodes = len(cap_r)
    count = s.count  # (every node's sum and largest ratio: prepared for every node)
    dot, array, minimum, where, absolute = np.dot, np.array, np.minimum, np.where, np.abs
    while it < max_it:
        v = int(argmax())
        if sc[v] < 0:
            break  # every placed VM is tabu
        init = initial[v]
        if init != NO_HOST and host_l[v] == init and migrations >= max_mig:
            break  # the better mapping would need more migrations than the budget allows
        it += 1
        # --- destination (= Search.destination: its _candidates, then _exact) ---
        b = bid_r[v]
        nodes: list[int]
        if not b > 0:
            nodes = s._candidates(v)
        elif n_nodes - 1 <= 0:
            nodes = []
        else:
            c, i = capv_r[v], ideal_r[v]
            key = (b, c, i)
            entry = kept.get(key)
            now = len(log)
            if entry is None or now - entry[1] > STALE:
                est = minimum(c, b * cl_col / (bu_col + b))
                e = where(est > 0, absolute(1.0 - i / est), ERROR_LIMIT)
                kept[key] = [e, now]
            else:
                e = entry[0]
                if entry[1] < now:
                    # (a node moved several times since: its last terms, once)
                    for h in set(log[entry[1]:]):
                        x = b * cl_l[h] / (bu_l[h] + b)
                        x = c if c < x else x  # = np.minimum(c, x): NaN kept
                        e[h] = abs(1.0 - i / x) if x > 0 else ERROR_LIMIT
                    entry[1] = now
            src = host_l[v]
            was = e[src]
            e[src] = _INF
            k = k_cand if k_cand < n_nodes - 1 else n_nodes - 1
            cands = e.argpartition(k - 1)[:k]
            vals: list[float] = e[cands].tolist()
            e[src] = was
            nodes = cands.tolist()
            if min(vals) > -_INF and max(vals) < _INF:  # all finite: the usual
                nodes.sort()
            else:
                nodes = sorted(h for h, x in zip(nodes, vals, strict=True) if -_INF < x < _INF)
                if not nodes:
                    raise ValueError("no candidate destination with a finite estimate")
        dst = NO_HOST
        if nodes:
            b_v, c_v, i_v = b, capv_r[v], ideal_r[v]
            r_v = (b_v / c_v if c_v > 0 else _INF) if b_v > 0 else 0.0  # = bid_ratio
            total = len(nodes)
            for h in nodes:
                total += count[h]
            seg = total > small
            # Each candidate's share, its error and the first smallest error in one pass
            # (= the shares' list, then ``errors``, then the first argmin by ``<``); a capped
            # node of a segmented clearing, or unsafe sums, take the general path.
            general = seg and not safe(r)
            best, best_e = 0, _INF
            if not general:
                q_s = q_c = q_r = _NAN  # the terms of the last candidate the first step answered
                for g, h in enumerate(nodes):
                    s_h, c_h, m_h = sums[h], cap_r[h], rmaxs[h]
                    if s_h == q_s and c_h == q_c and m_h == q_r:
                        continue  # the last one's terms: its error, not smaller (docstring)
                    rm = r_v if r_v > m_h else m_h
                    left_b = (s_h + b_v) - 0.0  # = first_step(sums[h] + b_v, cap_r[h])
                    if left_b < 0.0:
                        left_b = 0.0
                    left_c = c_h - 0.0
                    p = 0.0 if left_b <= 0.0 else left_b / left_c if left_c > 0.0 else _INF
                    if not rm <= p * _LIMIT:
                        if seg:
                            general = True
                            break
                        lists(h)
                        a = share_of_last(nb[h] + [b_v], nc[h] + [c_v], cap_r[h])
                    elif 0.0 < p < _INF:
                        q_s, q_c, q_r = s_h, c_h, m_h
                        a = b_v / p if p >= _TINY else (b_v / left_b) * left_c
                        if seg and not -_INF < a < _INF:
                            a = 0.0
                    else:
                        q_s, q_c, q_r = s_h, c_h, m_h
                        a = 0.0
                    if a > 0:  # = errors([a], [i_v])[0]
                        x = (a - i_v) / a
                        if x > ERROR_LIMIT or x < -ERROR_LIMIT:
                            x = ERROR_LIMIT
                        elif x < 0.0:
                            x = -x
                    else:
                        x = ERROR_LIMIT if i_v > 0 else 0.0
                    if not x > 0.0:
                        x = 0.0
                    if g == 0 or x < best_e:
                        best, best_e = g, x
            if general:
                for h in nodes:
                    lists(h)
                errs = s._exact(v, nodes)
                best = 0
                for g in range(1, len(errs)):
                    if errs[g] < errs[best]:
                        best = g
            dst = nodes[best]
        if dst != NO_HOST:
            # --- move (= Search.move in the usual market) ---
            src = host_l[v]
            if init != NO_HOST:  # leaving the initial host costs one, coming back refunds it
                migrations += int(dst != init) - int(src != init)
            if not loaded[src]:  # (a node's members, in ascending VM index at the start)
                loaded[src] = True
                members[src] = sorted_vms[bounds[src]:bounds[src + 1]].tolist()
            if not loaded[dst]:
                loaded[dst] = True
                members[dst] = sorted_vms[bounds[dst]:bounds[dst + 1]].tolist()
            count[src] -= 1
            count[dst] += 1
            moves.append((v, dst))
            ms, md = members[src], members[dst]
            ms.remove(v)
            md.append(v)
            # (a node's bids and ratios in its members' order: the lists Search.move keeps)
            sums[src] = sum([bid_r[j] for j in ms])
            rmaxs[src] = max([ratio_r[j] for j in ms], default=-_INF)
            sums[dst] = sums[dst] + b  # = the sum of dst's bids: v is last
            r_v = ratio_r[v]
            if r_v > rmaxs[dst]:
                rmaxs[dst] = r_v
            host_l[v] = dst
            m = ms + md
            # the pair's shares and the VMs' new errors in one pass (= the shortcut's
            # pair_shares, then ``errors``; else the general path's)
            n = len(ms) + len(md)
            seg = n > small
            ok = not seg or safe(r)
            if ok:
                p_s, lb_s, lc_s = first_step(sums[src], cap_r[src])
                p_d, lb_d, lc_d = first_step(sums[dst], cap_r[dst])
                ok = rmaxs[src] <= p_s * _LIMIT and rmaxs[dst] <= p_d * _LIMIT
            new: list[float] = []
            old: list[float] = []
            if ok:
                bu_v[src], cl_v[src], bu_v[dst], cl_v[dst] = lb_s, lc_s, lb_d, lc_d
                bu_l[src], cl_l[src], bu_l[dst], cl_l[dst] = lb_s, lc_s, lb_d, lc_d
                for js, p, left_b, left_c in ((ms, p_s, lb_s, lc_s), (md, p_d, lb_d, lc_d)):
                    pos = 0.0 < p < _INF
                    for j in js:
                        if not pos:
                            a = 0.0
                        else:
                            bj = bid_r[j]
                            a = bj / p if p >= _TINY else (bj / left_b) * left_c
                            if seg and not -_INF < a < _INF:
                                a = 0.0
                        i_j = ideal_r[j]
                        if a > 0:  # = errors([a], [i_j])[0]
                            x = (a - i_j) / a
                            if x > ERROR_LIMIT or x < -ERROR_LIMIT:
                                x = ERROR_LIMIT
                            elif x < 0.0:
                                x = -x
                        else:
                            x = ERROR_LIMIT if i_j > 0 else 0.0
                        if not x > 0.0:
                            x = 0.0
                        new.append(x)
                        y = err_l[j]
                        old.append(y)
                        err_l[j] = x
                        sc[j] = -1.0 if is_tabu[j] else x
                        n_over += (x > threshold) - (y > threshold)
            else:
                lists(src)
                lists(dst)
                alloc = s._pair_general(r, src, dst, n)
                f.synced(r, (src, dst))
                new = errors(alloc, [ideal_r[j] for j in m])
                for x, j in zip(new, m, strict=True):
                    y = err_l[j]
                    old.append(y)
                    err_l[j] = x
                    sc[j] = -1.0 if is_tabu[j] else x
                    n_over += (x > threshold) - (y > threshold)
            log += (src, dst)
            new_err, old_err = array(new), array(old)
            sumsq += float(dot(new_err, new_err) - dot(old_err, old_err))
        # v becomes tabu; the oldest tabu VM is released when the list is full.
        tabu.append(v)
        is_tabu[v] = True
        sc[v] = -1.0
        if len(tabu) > tabu_size:
            u = tabu.popleft()
            is_tabu[u] = False
            sc[u] = err_l[u]
        rms = math.sqrt(max(sumsq, 0.0) / n_placed)
        if dst != NO_HOST and rms < best_rms * (1.0 - 1e-9):
            best_n, best_rms, no_improve = len(moves), rms, 0
            if not n_over:
                break
        else:
            no_improve += 1
            if no_improve >= max_no_improve:
                break
    s.migrations, s.sumsq = migrations, sumsq
    best_host = start_host
    if best_n >= 0:
        best_host = start_host.copy()
        for u, h in moves[:best_n]:
            best_host[u] = h
    return it, best_host, best_rms

