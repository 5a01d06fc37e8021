"""One market run of themis-fig5 under cProfile (CPU time): the run at inter-arrival factor
``F`` (HPC2N's first 1,000 jobs, vertical-deadline, 240 hosts × 1 core). Prints the run's CPU
seconds and outcome, writes the profile to ``/tmp/f5_F.prof`` (read it with ``pstats``).

    PYTHONPATH=src python scripts/profile_fig5_run.py 0.2 [--no-profile] [--jobs N]
"""

from __future__ import annotations

import argparse
import cProfile
import time

from merkat.experiments.common import Run, execute
from merkat.experiments.themis import _fig5_runs


def market_run(ap: argparse.ArgumentParser, factor: float, jobs: int | None = None) -> Run:
    """themis-fig5's market run at inter-arrival ``factor`` on its first ``jobs`` jobs (all
    1,000 by default); a factor or count out of range is ``ap``'s one-line error (exit 2)."""
    if not 0 < factor <= 10:
        ap.error(f"factor must be in (0, 10], got {factor}")
    if jobs is not None and jobs < 1:
        ap.error(f"--jobs must be >= 1, got {jobs}")
    return next(r for r in _fig5_runs(1, jobs, (factor,)) if r.label == "market")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("factor", type=float, help="the inter-arrival factor (0.1-1.0)")
    ap.add_argument("--no-profile", action="store_true", help="time the run only")
    ap.add_argument("--jobs", type=int, default=1000, help="the first N jobs (default 1000)")
    args = ap.parse_args()
    run = market_run(ap, args.factor, args.jobs)
    pr = None if args.no_profile else cProfile.Profile(time.process_time)
    t0 = time.process_time()
    if pr is not None:
        pr.enable()
    out = execute(run)
    if pr is not None:
        pr.disable()
        pr.dump_stats(f"/tmp/f5_{args.factor}.prof")
    print(round(time.process_time() - t0, 2),
          {k: v for k, v in out.items() if not isinstance(v, (list, dict))})


if __name__ == "__main__":
    main()
