"""The Maui-like batch baseline (Merkat §5.4.3): FCFS priority by queue time, EASY backfilling
on the users' *inexact* wall-time estimates.

Maui's defaults, as the Merkat paper ran it under Torque: the priority of a job is its queue
time (``QUEUETIMEWEIGHT``, nothing else weighted), so the queue is FCFS; ``BACKFILLPOLICY
FIRSTFIT`` with ``RESERVATIONDEPTH 1``: the top job gets one reservation and later jobs start
now if they do not delay it, judged on their wall-time limits. That is EASY backfilling
(:class:`merkat.worlds.batch.baselines.Easy`); what makes it Maui here is the estimates:

- a job whose trace gives a requested time (SWF field 9) keeps it (``Workload.estimated``);
- any other job (a Lublin job, a trace without field 9) gets a wall time from
  :func:`tsafrir_estimates`, a simplified form of Tsafrir, Etsion and Feitelson's model of user
  runtime estimates ("Modeling user runtime estimates", JSSPP 2005): users pick one of a few
  round *popular values*, never below the run time (Torque kills a job at its wall time, so a
  job that ran to the end had a limit at least its run time), the popular values weighted as in
  :data:`POPULAR`. A run longer than the largest popular value gets its run rounded up to the
  next hour. The draws come from the run's ``estimates`` stream (:mod:`merkat.seeds`), so they
  never shift the workload's other draws.

A job running past its estimate (a trace's own requested time can be short) is not killed:
like EASY here, it counts as ending now in the reservation and keeps running to its real end.
Pure: no I/O.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import numpy.typing as npt

from merkat import seeds
from merkat.workload.jobs import Workload

ESTIMATES = "estimates"
"""The seed stream of the estimate model's draws."""

_MIN = 60.0
POPULAR: tuple[tuple[float, float], ...] = (
    (5 * _MIN, 2.0), (10 * _MIN, 3.0), (15 * _MIN, 4.0), (20 * _MIN, 2.0), (30 * _MIN, 6.0),
    (45 * _MIN, 2.0), (60 * _MIN, 10.0), (90 * _MIN, 2.0), (120 * _MIN, 8.0),
    (180 * _MIN, 4.0), (240 * _MIN, 6.0), (300 * _MIN, 2.0), (360 * _MIN, 3.0),
    (480 * _MIN, 3.0), (600 * _MIN, 2.0), (720 * _MIN, 4.0), (1080 * _MIN, 1.0),
    (1440 * _MIN, 6.0), (2160 * _MIN, 1.0), (2880 * _MIN, 9.0),
)
"""(wall time s, relative popularity): the round values users choose, the largest (48 h, the
usual queue limit) among the most popular, as Tsafrir et al. observe in every log."""


def tsafrir_estimates(run: npt.ArrayLike, rng: np.random.Generator) -> npt.NDArray[np.float64]:
    """One wall-time estimate per run time: a popular value ``>= run``, drawn with probability
    proportional to its popularity among those; a run above every popular value gets the run
    rounded up to the next whole hour. One uniform draw per job (in order)."""
    r = np.asarray(run, dtype=np.float64)
    values = np.array([v for v, _ in POPULAR])
    weights = np.array([w for _, w in POPULAR])
    u: list[float] = np.asarray(rng.random(r.shape[0])).tolist()
    out = np.empty(r.shape[0])
    for i, (x, ui) in enumerate(zip(r.tolist(), u, strict=True)):
        first = int(np.searchsorted(values, x, side="left"))
        if first == len(values):
            out[i] = np.ceil(x / 3600.0) * 3600.0
            continue
        cum = np.cumsum(weights[first:])
        k = int(np.searchsorted(cum, ui * cum[-1], side="right"))
        out[i] = values[first + min(k, len(cum) - 1)]
    return out


def maui_workload(workload: Workload, seed: int) -> Workload:
    """``workload`` with the estimates Maui schedules on: the user's requested time where the
    workload has one, a :func:`tsafrir_estimates` wall time elsewhere (drawn for every job in
    order, so a job's estimate does not depend on which others have one)."""
    model = tsafrir_estimates(workload.run, seeds.stream(seed, ESTIMATES))
    given = workload.estimated
    est = model if given is None else np.where(given, workload.estimate, model)
    return dataclasses.replace(workload, estimate=est)
