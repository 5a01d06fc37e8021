"""``merkat bench sweep``: an experiment's whole sweep, timed end to end (issue 11's target:
``themis-fig5`` on two workers in at most 60 s with the default install).

:func:`run` runs what ``merkat sim experiment NAME --workers N`` runs (the same runs, the same
files, written to a temporary directory unless ``out`` is given) and returns
``{experiment, workers, runs, wall_s, process_wall_s, cpu_s, run_wall_sum_s, results_sha256,
target_s, met}``.

``wall_s`` is the experiment from its imports to its last file; ``process_wall_s`` the whole
command since the process started (what ``/usr/bin/time`` reports, interpreter start-up
included; ``wall_s`` where ``/proc`` is missing); ``cpu_s`` the CPU time of this process and
its worker processes; ``run_wall_sum_s`` the sum of the runs' own times (``timing.json``: the
best possible wall on N workers is this sum over N); ``results_sha256`` the digest of
``results.json``, which does not depend on the machine: two versions of the code that print
the same digest computed the same results. ``met``: ``process_wall_s <= target_s``.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from merkat.bench.common import cpu_seconds, process_age_s


def run(name: str, *, workers: int, jobs: int | None, factors: Any, target: float,
        out: Path | None, t0: float, cpu0: float) -> dict[str, Any]:
    """Run experiment ``name`` and time it from ``t0`` (``time.perf_counter``) and ``cpu0``
    (:func:`~merkat.bench.common.cpu_seconds`), taken by the caller before its imports.
    ``out``: an absent or empty directory the caller checked, filled only on success. Raises
    what :func:`~merkat.experiments.run_experiment` raises (FileNotFoundError or
    ValueError for bad input, RuntimeError when a run fails)."""
    from merkat.experiments import run_experiment
    from merkat.outputs import output_dir

    with ExitStack() as stack:
        # out as `sim experiment --out`: refused when not empty, replaced only on success
        where = (stack.enter_context(output_dir(out)) if out is not None else
                 Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="merkat-sweep-"))))
        run_experiment(name, where, workers=workers, jobs=jobs, factors=factors)
        wall = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
        digest = hashlib.sha256((where / "results.json").read_bytes()).hexdigest()
        timing = json.loads((where / "timing.json").read_text())
    runs = timing.get("runs", [])
    process_wall = process_age_s()
    total = process_wall if process_wall is not None else wall
    return {
        "experiment": name,
        "workers": workers,
        "runs": len(runs),
        "wall_s": round(wall, 3),
        "process_wall_s": round(total, 3),
        "cpu_s": round(cpu, 3),
        "run_wall_sum_s": round(sum(float(r.get("wall_s", 0.0)) for r in runs), 3),
        "results_sha256": digest,
        "target_s": target,
        "met": total <= target,
    }
