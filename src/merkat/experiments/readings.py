"""Readings of the SLO paper (issue 29, disagreement 2): the modelling choices the paper leaves
open, each an option of ``slo-fig2`` / ``slo-fig3`` (``--reading KEY=VALUE``) and a row of the
``slo-ablation`` table (docs/experiments.md, "Explained (issue 29, disagreement 2)").

:data:`READINGS` maps a key to its values, the reading as first built first; :data:`DEFAULTS`
are ``slo-fig2``'s and ``slo-fig3``'s since the ablation (``edf=kill``: it reproduces Fig. 2(a)'s
growing loss to EDF and is as faithful to the text, docs/experiments.md):

- ``edf``: what EDF does with a job that can no longer meet its deadline — ``run`` it late
  to completion (non-preemptive, as first built) or ``kill`` it: a waiting job whose run time
  no longer fits before its deadline is discarded, never started (:class:`EdfKill`), as the
  market's strict controllers abort a hopeless job (the default of ``slo-fig2``);
- ``value``: what B weighs in Table 1 — ``job`` (B per job, as built) or ``tasks`` (§4.2: "B is
  the application's budget per time scheduling period and per task": B × tasks per job);
- ``overheads``: the VMs' boot and resume times — ``paper`` (30 s each, §4.3) or ``none``;
- ``suspend``: how eagerly a controller suspends and retries — ``eager`` (back-off 0-3
  periods before suspending, retry a postponed start or resume after 1-3 periods, as built) or
  ``damped`` (0-12 and 1-12: Alg. 1's max_iterations and t_wait, which the paper does not give).

A reading changes a :class:`~merkat.experiments.common.Run` (:func:`apply_readings`), never
the code path. A ``Run``'s own defaults are the runs as first built (EDF runs hopeless jobs
late), so the golden digests and ``themis-fig5`` do not move; ``slo-fig2`` builds its EDF runs
with ``late="kill"`` (``--reading edf=run`` gives the earlier ones back).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from merkat.worlds.batch.baselines import Edf
from merkat.worlds.batch.engine import Context

READINGS: dict[str, tuple[str, ...]] = {
    "edf": ("run", "kill"),
    "value": ("job", "tasks"),
    "overheads": ("paper", "none"),
    "suspend": ("eager", "damped"),
}
"""Every reading key and its values (the first: as first built)."""

DEFAULTS: dict[str, str] = {"edf": "kill", "value": "job", "overheads": "paper", "suspend": "eager"}
"""The readings ``slo-fig2`` and ``slo-fig3`` run by default."""

DAMPED = (("backoff_max", 12), ("max_wait", 12))
"""The ``suspend=damped`` controller parameters (an hour of 5-minute periods at most)."""


def check_readings(given: Mapping[str, str]) -> dict[str, str]:
    """``given`` checked against :data:`READINGS`: ValueError naming the key or the value."""
    out: dict[str, str] = {}
    for key, value in given.items():
        if key not in READINGS:
            raise ValueError(f"--reading: unknown key {key!r}; known: {', '.join(READINGS)}")
        if value not in READINGS[key]:
            raise ValueError(f"--reading {key}: must be one of {', '.join(READINGS[key])}, "
                             f"got {value!r}")
        out[key] = value
    return out


def parse_readings(items: list[str]) -> dict[str, str]:
    """``KEY=VALUE`` strings (the CLI's ``--reading``) as a checked mapping."""
    given: dict[str, str] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            raise ValueError(f"--reading: expected KEY=VALUE, got {item!r}")
        given[key.strip()] = value.strip()
    return check_readings(given)


def apply_readings(run: Any, readings: Mapping[str, str], market: bool) -> Any:
    """``run`` (a trace :class:`Run`) under ``readings``; ``market``: whether it is a market
    run (overheads and suspend apply to those, edf to the EDF baseline, value to all)."""
    r = run
    if "value" in readings:
        r = replace(r, value_unit=readings["value"])
    if market:
        if readings.get("overheads") == "none":
            r = replace(r, boot_s=0.0, resume_s=0.0)
        if readings.get("suspend") == "damped":
            params = dict(r.policy_params)
            params.update(DAMPED)
            r = replace(r, policy_params=tuple(sorted(params.items())))
    elif "edf" in readings and r.scheduler == "edf":
        r = replace(r, late=readings["edf"])
    return r


class EdfKill(Edf):
    """EDF that discards hopeless jobs: at each pass, a waiting job whose run time no longer
    fits between now and its deadline is dropped from the queue and never starts (its start
    and end stay NaN: it is worth 0, or its partial utility of no work). The others as
    :class:`~merkat.worlds.batch.baselines.Edf`. The run time is the job's true one: the market's
    controllers also know their work (they abort on the same test)."""

    name = "edf-kill"

    def schedule(self, ctx: Context) -> None:
        deadline = ctx.workload.deadline
        for j in ctx.queue:
            if ctx.now + ctx.run[j] > float(deadline[j]):
                ctx.drop(j)
        super().schedule(ctx)
