"""A market run cut where the cluster is empty, its pieces simulated in parallel.

**Why a cut is exact.** When no application is active (every earlier job has finished or been
stopped, none waits or is suspended), what the rest of a market run does depends only on the
jobs still to come and on what the empty platform carries over that a controller can see:

- the jobs' own parameters and random generators (each controller draws from its own
  stream of the run's seed, ``controllers/<job id>`` (:mod:`merkat.seeds`), not from a
  shared one);
- the last prices (an empty market clears at 0, like a fresh platform's), compared bit for bit;
- the time of the next period: the first boundary at or after the next arrival, whichever way
  the run got there (the loop submits every job at the first boundary at or after its
  arrival, and jumps over idle time to the next one);
- nothing else: the backend has no VM, the bank renews and charges only active applications
  (every period on the simulated platform), VM names are per
  application, the market's reuse of its last clearing is a cache of a pure function, and the
  price history is shown only to controllers that declare ``reads_price_history`` (none of the
  registered policies does; a run with such a policy is not cut).

Ended applications take no further part (the run summarises and forgets them; their
accounts stay in the bank). So a run
started afresh at job ``c`` and the whole run, once both are empty before the same job ``i``
(``i ≥ c``), go on identically; the whole run's outcome is the first run's up to ``i`` and the
second's from ``i``, with period records renumbered and operation counts added.

**How.** :func:`choose_cuts` proposes where to start the pieces: points where the cluster
would be empty if every job ran at once for exactly its run time (necessary for the market's
cluster to be empty, apart from jobs its controllers stop early), placed to balance an
estimate of the work (periods × applications). Piece ``k`` runs on its own process from its
cut; at each of its idle points it publishes that it was idle there, and it stops at the first
of them where a later piece was idle too (waiting, if needed, until that piece has got past
it). Piece 0 runs in the calling process. A cut at a point where the market's cluster is busy
costs speed (the piece before it runs on to the next common idle point), never exactness.
``tests/test_parallel.py`` checks every field of the outcome against one process.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from ctypes import c_byte, c_longlong
from typing import Any

import numpy as np

from merkat.control.registry import POLICIES
from merkat.core.period_log import PeriodLog
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.options import MarketConfig
from merkat.worlds.merkat.trace import (
    MarketOutcome,
    Segment,
    max_cpu,
    paused_gc,
    policy_names,
    run_segment,
    simulate_market,
)

MIN_JOBS_PER_PIECE = 2_000
"""Fewer jobs than this per worker: one process (starting one costs about a second)."""

_POLL_S = 0.005
log = logging.getLogger(__name__)


def cut_candidates(submit: np.ndarray, run: np.ndarray, period: float) -> np.ndarray:
    """Jobs before which the cluster would be empty if every job ran from its arrival for
    exactly its run time, with two periods to spare."""
    if len(submit) < 2:
        return np.zeros(0, dtype=np.int64)
    busy_until = np.maximum.accumulate(submit + run)
    i = np.flatnonzero(submit[1:] > busy_until[:-1] + 2 * period) + 1
    return i.astype(np.int64)


def choose_cuts(workload: Workload, pieces: int, period: float) -> list[int]:
    """Where to start pieces 1 … ``pieces``-1: for each share k/pieces of the estimated work
    (one unit per job and per period it runs), the last candidate (:func:`cut_candidates`)
    before it; increasing, without repeats, never 0."""
    n = len(workload)
    if pieces < 2 or n < 2:
        return []
    work = np.cumsum(workload.run / period + 1.0)
    before = np.concatenate(([0.0], work[:-1]))  # the work of the jobs before each job
    cand = cut_candidates(workload.submit, workload.run, period)
    cuts: list[int] = []
    for k in range(1, pieces):
        target = work[-1] * k / pieces
        ok = cand[before[cand] <= target]
        c = int(ok[-1]) if ok.size else int(np.searchsorted(before, target))
        if 0 < c < n and (not cuts or c > cuts[-1]):
            cuts.append(c)
    return cuts


class _Board:
    """What the pieces tell each other, in memory shared by the processes: per piece, a flag
    per job (idle before it, in a fresh platform's state) and how far it has got (every job
    before it submitted; ``n + 1``: finished or failed)."""

    def __init__(self, ctx: Any, n: int, starts: Sequence[int]) -> None:
        self.n = n
        self.starts = list(starts)
        self.flags = [ctx.RawArray(c_byte, n + 1) for _ in starts]
        self.progress = [ctx.RawValue(c_longlong, s) for s in starts]
        self.failed = [ctx.RawValue(c_byte, 0) for _ in starts]


class _Handoff:
    """Piece ``k``'s side of the board (:class:`merkat.worlds.merkat.Handoff`)."""

    def __init__(self, board: _Board, k: int, wait: Callable[[], None]) -> None:
        self.board, self.k, self.wait = board, k, wait
        self.flags = board.flags[k]
        self.progress = board.progress[k]

    def idle(self, i: int) -> int | None:
        b = self.board
        self.flags[i] = 1  # before ``passed`` moves past i: a reader sees it settled
        for j in range(len(b.starts) - 1, self.k, -1):  # the furthest piece first
            if b.starts[j] > i:
                continue
            while b.progress[j].value <= i:  # piece j has not settled i yet
                self.wait()
            if b.flags[j][i]:
                return j
        return None

    def passed(self, i: int) -> None:
        self.progress.value = i


def _piece(k: int, seg: Segment) -> dict[str, Any]:
    """What the caller needs of a piece that ran from its start to ``seg.stop`` (the merge
    keeps the part from where the piece before it handed over)."""
    return {
        "piece": k,
        "start": seg.start,
        "stop": seg.stop,
        "handoff": seg.handoff,
        "jobs": seg.jobs(seg.start, seg.stop),
        "records": seg.platform.records,
        "counts": dict(seg.backend.counts),
        "at_idle": seg.at_idle,
        "audit_ok": seg.economy.ledger.audit().ok,
        "totals": seg.economy.totals(),
        "economy": (seg.economy.kind, seg.economy.charging),
    }


def _child(
    k: int,
    workload: Workload,
    cluster: Cluster,
    cfg: MarketConfig,
    names: tuple[str, ...],
    board: _Board,
    results: Any,
    seed: int,
) -> None:
    """Piece ``k`` on its own process: its result (or its error) goes to ``results``.

    Forked, it ends with ``os._exit`` once its report is in the pipe: a forked child must not
    take locks another thread of the caller may have held at the fork (a progress bar's
    refresh thread and the standard streams, which an ordinary exit flushes)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the command's handler: just stop
    t0 = time.perf_counter()
    try:
        with paused_gc():
            seg = run_segment(
                workload, cluster, cfg, names, board.starts[k], None,
                _Handoff(board, k, lambda: time.sleep(_POLL_S)), seed=seed,
            )
        out = _piece(k, seg)  # (its records pickle as columns: PeriodLog)
        out["wall_s"] = time.perf_counter() - t0
        results.put((k, out, None))
        code = 0
    except BaseException:  # reported to the caller, who raises it
        results.put((k, None, traceback.format_exc()))
        board.failed[k].value = 1  # after the report: the caller then waits for it
        code = 1
    board.progress[k].value = board.n + 1
    results.close()
    results.join_thread()  # the report is in the pipe
    os._exit(code)


def _stateless(market: str) -> bool:
    from merkat.market.mechanisms import MECHANISMS

    return market not in MECHANISMS or MECHANISMS.get(market).stateless


def reads_history(names: Sequence[str], params: Mapping[str, Any] | None = None) -> bool:
    """Whether any of these policies, with these parameters, reads past prices (a run with
    one is not cut)."""
    from merkat.control.registry import PolicyError, make_policy

    for p in sorted(set(names)):
        if p not in POLICIES:
            continue
        if POLICIES[p].reads_price_history:
            return True
        try:
            if params and make_policy(p, **params).reads_price_history:
                return True
        except PolicyError:  # parameters it does not take: the run itself reports them
            continue
    return False


def simulate_parallel(
    workload: Workload,
    cluster: Cluster,
    cfg: MarketConfig | None = None,
    policies: Sequence[str] | None = None,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
    workers: int = 1,
    cuts: Sequence[int] | None = None,
) -> MarketOutcome:
    """:func:`~merkat.worlds.merkat.simulate_market` on ``workers``
    processes (see the module docstring): the caller of a market run chooses this for
    ``--workers`` > 1; one worker and no ``cuts`` is exactly ``simulate_market``. ``cuts``
    overrides :func:`choose_cuts` (increasing job indices, > 0)."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    cfg = cfg or MarketConfig()
    names = policy_names(workload, cfg, policies)
    if workers == 1 and cuts is None:
        return simulate_market(workload, cluster, cfg, policies=names, seed=seed,
                               progress=progress)
    t_wall = time.perf_counter()
    n = len(workload)
    if cuts is None:
        pieces = min(workers, n // MIN_JOBS_PER_PIECE)
        cuts = (choose_cuts(workload, pieces, cfg.period)
                if not reads_history(names, cfg.policy_params) and cfg.economy != "closed"
                and _stateless(cfg.market) else [])
    else:
        cuts = list(cuts)
        if any(not 0 < c < n for c in cuts) or cuts != sorted(set(cuts)):
            raise ValueError(f"cuts must be increasing job indices in 1..{n - 1}, got {cuts}")
        if cuts and reads_history(names, cfg.policy_params):
            raise ValueError("a policy reads past prices: the run cannot be cut")
        if cuts and not _stateless(cfg.market):
            raise ValueError(f"the {cfg.market} market carries its prices across idle points: "
                             "the run cannot be cut")
        if cuts and cfg.economy == "closed":
            raise ValueError("a closed economy carries money across idle points: the run "
                             "cannot be cut")
    if not cuts:
        return simulate_market(workload, cluster, cfg, policies=names, seed=seed,
                               progress=progress)
    starts = [0, *cuts]
    # fork where there is one (Linux): no re-import of the caller's main module, no copy of
    # the workload; spawn elsewhere (the caller then needs the ``__main__`` guard).
    ctx: Any = mp.get_context("fork" if "fork" in mp.get_all_start_methods() else "spawn")
    board = _Board(ctx, n, starts)
    results = ctx.Queue()
    procs = {
        k: ctx.Process(
            target=_child,
            args=(k, workload, cluster, cfg, names, board, results, seed),
            name=f"merkat-piece-{k}",
            daemon=True,
        )
        for k in range(1, len(starts))
    }
    got: dict[int, dict[str, Any]] = {}
    shown = 0

    seg0_done = 0

    def show() -> None:  # jobs submitted, over every piece (at most n: pieces overlap a little)
        nonlocal shown
        done = seg0_done + sum(
            max(0, min(board.progress[k].value, n) - starts[k]) for k in procs
        )
        done = min(done, n)
        if progress is not None and done > shown:
            progress(done - shown)
            shown = done

    def collect(block: bool) -> None:
        """Results that have arrived; raises a piece's error (even a piece whose part turned
        out not to be needed: it is a bug); notices a piece that died."""
        failed = [k for k in procs if board.failed[k].value]  # its report is on its way
        until = time.monotonic() + 60.0
        while True:
            try:
                k, out, err = results.get(timeout=_POLL_S if block or failed else 0.0)
            except queue.Empty:
                if failed and time.monotonic() < until:
                    continue
                if failed:
                    raise RuntimeError(f"piece {failed[0]} of the market run failed") from None
                break
            if err is not None:
                raise RuntimeError(f"piece {k} of the market run failed:\n{err}")
            got[k] = out
            block = False
        for k, p in procs.items():
            if k not in got and p.exitcode is not None and results.empty():
                raise RuntimeError(
                    f"piece {k} of the market run died (exit code {p.exitcode}) without a result"
                )

    def wait() -> None:
        show()
        collect(block=True)

    def count(k: int) -> None:
        nonlocal seg0_done
        seg0_done += k
        show()

    try:
        for p in procs.values():
            p.start()
        with paused_gc():
            seg0 = run_segment(
                workload, cluster, cfg, names, 0, count, _Handoff(board, 0, wait), seed=seed
            )
        board.progress[0].value = n + 1
        collect(block=False)
        t_first = time.perf_counter() - t_wall
        first = _piece(0, seg0)
        chain = [(first, 0)]
        piece = first
        while piece["handoff"] is not None:
            j = piece["handoff"]
            while j not in got:
                wait()
            chain.append((got[j], piece["stop"]))
            piece = got[j]
        show()
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
        for p in procs.values():
            if p.pid is not None:  # started
                p.join()
        results.close()
    first["wall_s"] = t_first
    for piece, lo in chain:
        log.info("market run: piece %d (started before job %d) gives jobs %d-%d (%.1f s)",
                 piece["piece"], piece["start"], lo, piece["stop"] - 1, piece["wall_s"])
    return _merge(chain, names, time.perf_counter() - t_wall)


def _merge(
    chain: list[tuple[dict[str, Any], int]], names: tuple[str, ...], wall_s: float
) -> MarketOutcome:
    """One outcome from pieces in job order, each valid from its job ``lo``."""
    jobs: dict[str, list[Any]] = {}
    parts: list[tuple[PeriodLog, int]] = []
    counts: dict[str, int] = {}
    audit_ok = True
    money = {"minted": 0, "initial_budgets": 0, "redistributed": 0, "provider": 0}
    for piece, lo in chain:
        n_rec, before, books = piece["at_idle"][lo]  # every piece was idle where its part begins
        parts.append((piece["records"], n_rec))
        for key in money:
            money[key] += piece["totals"][key] - books[key]
        part = piece["jobs"]
        skip = lo - piece["start"]
        for key, v in part.items():
            jobs.setdefault(key, []).append(v[skip:])
        for key, c in piece["counts"].items():
            c -= before.get(key, 0)
            if c:
                counts[key] = counts.get(key, 0) + c
        audit_ok = audit_ok and piece["audit_ok"]
    records = PeriodLog.concat(parts)
    cat: dict[str, Any] = {k: np.concatenate(v) for k, v in jobs.items()
                           if k not in ("reasons", "outcomes")}
    reasons = tuple(r for part in jobs["reasons"] for r in part)
    outcomes = tuple(r for part in jobs["outcomes"] for r in part)
    kind, charging = chain[0][0]["economy"]
    m = 1_000_000
    # a themis economy leaves nothing in user accounts: the money is the applications' or the
    # provider's (the same books as one process: Economy.summary)
    bank = {
        "economy": kind, "charging": charging, "minted": money["minted"] / m, "burned": 0.0,
        "initial_budgets": money["initial_budgets"] / m,
        "redistributed": money["redistributed"] / m,
        "balances": {"application": (money["minted"] - money["provider"]) / m, "bank": 0.0,
                     "provider": money["provider"] / m, "sub": 0.0, "user": 0.0},
        "negative_accounts": 0, "audit_ok": audit_ok,
    }
    return MarketOutcome(
        cat["start"], cat["end"], cat["finished"], cat["met"], cat["value"], cat["work_done"],
        names, reasons, records, counts, int(cat["suspended"].sum()), audit_ok,
        max_cpu(records), wall_s,
        tuple(
            {"piece": p["piece"], "first_job": lo, "last_job": p["stop"] - 1,
             "wall_s": round(p["wall_s"], 3)}
            for p, lo in chain
        ),
        outcomes=outcomes, paid=cat["paid"], bank=bank,
    )
