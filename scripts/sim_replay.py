"""The simulated backend alone: record a run's backend calls, replay them against the code on
``PYTHONPATH`` and time each kind.

Usage::

    PYTHONPATH=src python scripts/sim_replay.py record OUT.pkl [--jobs N] [--trace F]
    PYTHONPATH=src python scripts/sim_replay.py record OUT.pkl --fig5 0.2
    PYTHONPATH=src python scripts/sim_replay.py replay OUT.pkl [--repeat 3]

``record`` runs ``merkat bench period`` (deadline-strict, 240 hosts, admission every 10 s) and
keeps every call the driver makes of its ``SimBackend`` (with ``--fig5 F``: themis-fig5's
market run at inter-arrival factor F instead, many-VM applications) (``add_app``, ``apply`` with its
plan, ``advance``, ``forget``, and what it observes: the applications' ids and statuses).
``replay`` gives the same calls to a fresh backend ``--repeat`` times and prints one JSON
object: the least CPU seconds (``time.process_time``, the garbage collector off, as in a trace
run) spent in each kind, and a digest of everything observed, which must be the same for two
versions of the backend that behave alike. A version without ``merkat.runtime.observe`` is
observed as its driver did, three calls per application. Replaying one recording with two
checkouts (``PYTHONPATH=A/src``, then ``B/src``) compares their backends on the same inputs,
free of the rest of the period (docs/benchmarks.md, "Issue 28, twelfth session: the simulated
world around the period").
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import pickle
import time
from types import SimpleNamespace
from typing import Any


def record(out: str, jobs: int, trace: str, fig5: float | None = None) -> None:
    from merkat.backends import sim
    from merkat.bench.period import run
    from merkat.runtime import driver

    calls: list[tuple[Any, ...]] = []
    cls = sim.SimBackend
    add, apply, advance, forget = cls.add_app, cls.apply, cls.advance, cls.forget
    seen = driver.observe

    def _add(self: Any, app_id: str, model: Any) -> None:
        if not calls:  # the backend's settings, once
            calls.append(("config", {k: getattr(self, k) for k in (
                "boot_s", "resume_s", "bandwidth", "migration_overhead", "trade_memory")}))
        calls.append(("add", app_id, model.vms, model.work_total, model.cpu, model.memory))
        add(self, app_id, model)

    def _apply(self: Any, plan: Any) -> Any:
        calls.append(("apply", plan))
        return apply(self, plan)

    def _advance(self: Any, t0: float, t1: float) -> None:
        calls.append(("advance", t0, t1))
        advance(self, t0, t1)

    def _forget(self: Any, ids: Any) -> None:
        calls.append(("forget", list(ids)))
        forget(self, ids)

    def _observe(backend: Any, apps: Any) -> Any:
        calls.append(("observe", [(a.spec.id, str(a.status)) for a in apps]))
        return seen(backend, apps)

    cls.add_app, cls.apply, cls.advance, cls.forget = _add, _apply, _advance, _forget
    driver.observe = _observe  # type: ignore[assignment]
    if fig5 is not None:
        from merkat.experiments.common import execute
        from merkat.experiments.themis import _fig5_runs
        one = next(r for r in _fig5_runs(1, None, (fig5,)) if r.label == "market")
        print(json.dumps({k: v for k, v in execute(one).items()
                          if not isinstance(v, (list, dict))}))
    else:
        print(json.dumps(run(trace, jobs=jobs, interarrival_factor=1.0, seed=0, hosts=240,
                             workers=1, admission=10.0)))
    with open(out, "wb") as f:
        pickle.dump(calls, f, protocol=5)  # (one dump: shared mappings stay shared)


def _observer() -> Any:
    try:
        from merkat.runtime.observe import observe
        return observe
    except ImportError:  # a version before runtime/observe.py: the driver's three calls
        from merkat.core.model import Observed

        def each(backend: Any, apps: Any) -> dict[str, Any]:
            return {a.spec.id: Observed(
                backend.metrics(a.spec.id),
                backend.idle(a.spec.id) if a.status == "running" else frozenset(),
                backend.finished(a.spec.id)) for a in apps}
        return each


def replay(path: str, repeat: int) -> None:
    from merkat.backends.sim import RigidApp, SimBackend

    observe = _observer()
    with open(path, "rb") as f:
        calls = pickle.load(f)
    for k, c in enumerate(calls):  # the observed applications' stand-ins, made once
        if c[0] == "observe":
            calls[k] = ("observe", [SimpleNamespace(spec=SimpleNamespace(id=i), status=s)
                                    for i, s in c[1]])
    best: dict[str, float] = {}
    digest = hashlib.sha256()
    clock = time.process_time
    gc.disable()
    for rep in range(repeat):
        backend = SimBackend()
        spent = dict.fromkeys(("add", "apply", "advance", "observe", "forget"), 0.0)
        for c in calls:
            kind = c[0]
            if kind == "config":
                backend = SimBackend(**c[1])
                continue
            if kind == "add":
                model = RigidApp(vms=c[2], work_total=c[3], cpu=c[4], memory=c[5])
                t = clock()
                backend.add_app(c[1], model)
            elif kind == "apply":
                t = clock()
                backend.apply(c[1])
            elif kind == "advance":
                t = clock()
                backend.advance(c[1], c[2])
            elif kind == "observe":
                t = clock()
                seen = observe(backend, c[1])
                spent[kind] += clock() - t
                if rep == 0:
                    for o in seen.values():
                        m = o.metrics
                        digest.update(repr((m.work_done, m.progress_rate, o.finished,
                                            sorted(o.idle))).encode())
                continue
            else:
                t = clock()
                backend.forget(c[1])
            spent[kind] += clock() - t
        for kind, s in spent.items():
            best[kind] = min(best.get(kind, float("inf")), s)
        gc.collect()
    best["total"] = sum(best.values())
    print(json.dumps({**{k: round(v, 4) for k, v in best.items()},
                      "digest": digest.hexdigest()[:16]}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out")
    rec.add_argument("--jobs", type=int, default=2000)
    rec.add_argument("--trace", default="HPC2N-2002-2.2-cln")
    rec.add_argument("--fig5", type=float, default=None, metavar="F",
                     help="record themis-fig5's market run at inter-arrival factor F")
    rep = sub.add_parser("replay")
    rep.add_argument("path")
    rep.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if args.command == "record":
        if args.fig5 is not None and not 0 < args.fig5 <= 10:
            parser.error(f"--fig5 must be in (0, 10], got {args.fig5}")  # one line, exit 2
        record(args.out, args.jobs, args.trace, args.fig5)
    else:
        replay(args.path, args.repeat)


if __name__ == "__main__":
    main()
