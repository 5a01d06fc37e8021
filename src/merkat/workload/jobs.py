"""Jobs to simulate: an SWF trace turned into columnar arrays with SLO attributes.

:func:`build_workload` is the one place where trace records become jobs, so that the batch
baselines and (later) the market run on *identical* jobs. Contract:

1. records ``skip .. skip+jobs`` of the trace, in file order, are taken;
2. they are sorted by (submit time, job id) — the queue order — and, with an inter-arrival
   factor ``f``, submit times become ``s0 + f * (s - s0)`` (every gap between consecutive
   submissions multiplied by ``f``; 0.1 = heavily loaded, 1 = the original);
3. per job: ``procs`` = requested processors (field 8) if > 0, else allocated (field 5); run time
   = field 4; estimate = requested time (field 9) if >= 0, else the run time; memory per task
   (MiB) = used memory (field 7, KB per processor) if > 0, else requested memory (field 10) if
   > 0, else drawn uniformly in ``[10 %, 90 %]`` of a node's memory;
4. SLO attributes (Themis §IV-B, SLO paper §4.4): deadline factor ``x ~ U[1.2, 10]``,
   deadline = submit + x × run time, budget = ``B_base / x`` (``B_base`` = 60 credits per
   resource unit per period, renewed at 20 — kept for the market);
5. jobs with a negative run time, no processors, or that cannot fit the empty machine (more
   processors than cores, or memory per task above a host's memory) are dropped and counted by
   reason in :attr:`Workload.dropped`.

Random draws come from the seed's ``workload`` stream (:mod:`merkat.seeds`; exactly
``numpy.random.default_rng(seed)``): the deadline factors for all taken records first, then
the memory fractions, so a job's attributes do not depend on which other jobs are dropped. The same trace, options and seed give the same arrays.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from merkat import seeds
from merkat.defaults import (
    BUDGET_BASE,
    BUDGET_RENEWAL,
    DEADLINE_FACTOR_MAX,
    DEADLINE_FACTOR_MIN,
)
from merkat.workload.cluster import Cluster
from merkat.workload.swf import SwfTrace

F64 = npt.NDArray[np.float64]
I64 = npt.NDArray[np.int64]

DEFAULT_NODE_MEMORY_MIB = 2048.0
"""Node memory used to draw missing job memory when the cluster has no memory limit (SLO paper
§4.4 gives each HPC2N node 2 GB)."""


@dataclass(frozen=True)
class SloConfig:
    """How SLO attributes are drawn (defaults: Themis / SLO paper)."""

    deadline_factor_min: float = DEADLINE_FACTOR_MIN
    deadline_factor_max: float = DEADLINE_FACTOR_MAX
    budget_base: float = BUDGET_BASE
    budget_renewal: float = BUDGET_RENEWAL
    memory_fraction_min: float = 0.1
    memory_fraction_max: float = 0.9

    def __post_init__(self) -> None:
        if not 0 < self.deadline_factor_min <= self.deadline_factor_max:
            raise ValueError(
                "deadline factor range must satisfy 0 < min <= max, got "
                f"[{self.deadline_factor_min}, {self.deadline_factor_max}]"
            )
        if not 0 < self.memory_fraction_min <= self.memory_fraction_max <= 1:
            raise ValueError("memory fraction range must satisfy 0 < min <= max <= 1")
        if self.budget_base < 0:
            raise ValueError("budget base must be >= 0")


@dataclass(frozen=True)
class Workload:
    """Jobs in queue order (submit, job id); every array has one entry per job.

    Times are seconds (``submit`` from the trace's origin), memory MiB per task, budget credits
    per resource unit per period.
    """

    job_id: I64
    submit: F64
    run: F64
    estimate: F64
    procs: I64
    memory: F64
    deadline_factor: F64
    deadline: F64
    budget: F64
    dropped: dict[str, int] = field(default_factory=dict)
    user: I64 | None = None  # the trace's user id per job (-1: unknown); None: not known at all
    estimated: npt.NDArray[np.bool_] | None = None
    """Per job, whether ``estimate`` is the user's own (the trace's requested time) rather than
    the run time standing in for it; None: no job has one (the Maui baseline models them)."""

    def __len__(self) -> int:
        return int(self.job_id.shape[0])

    @property
    def dropped_total(self) -> int:
        return sum(self.dropped.values())

    def memory_kib(self) -> I64:
        """Memory per task in whole KiB (rounded up), the unit the engine counts in."""
        return np.ceil(self.memory * 1024 - 1e-9).astype(np.int64)

    @classmethod
    def from_arrays(
        cls,
        submit: npt.ArrayLike,
        run: npt.ArrayLike,
        procs: npt.ArrayLike,
        *,
        estimate: npt.ArrayLike | None = None,
        memory: npt.ArrayLike | None = None,
        deadline_factor: npt.ArrayLike | None = None,
        budget_base: float = BUDGET_BASE,
        job_id: npt.ArrayLike | None = None,
    ) -> Workload:
        """A workload from plain arrays (tests, generated jobs); sorted into queue order.

        Defaults: estimate = run, memory 0, deadline factor 1 (deadline = submit + run), ids
        1..n. No job is dropped: the caller gives valid jobs.
        """
        s = np.asarray(submit, dtype=np.float64)
        n = s.shape[0]
        r = np.asarray(run, dtype=np.float64)
        ids = np.arange(1, n + 1) if job_id is None else np.asarray(job_id)
        ids = ids.astype(np.int64)
        est = r if estimate is None else np.asarray(estimate, dtype=np.float64)
        mem = np.zeros(n) if memory is None else np.asarray(memory, dtype=np.float64)
        fac = np.ones(n) if deadline_factor is None else np.asarray(deadline_factor, np.float64)
        order = np.lexsort((ids, s))
        s, r, est, mem, fac, ids = (
            s[order],
            r[order],
            est[order],
            mem[order],
            fac[order],
            ids[order],
        )
        p = np.asarray(procs, dtype=np.int64)[order]
        return cls(
            job_id=ids,
            submit=s,
            run=r,
            estimate=est,
            procs=p,
            memory=mem,
            deadline_factor=fac,
            deadline=s + fac * r,
            budget=budget_base / fac,
            estimated=None if estimate is None else np.ones(n, dtype=bool),
        )


def build_workload(
    trace: SwfTrace,
    cluster: Cluster,
    *,
    skip: int = 0,
    jobs: int | None = None,
    interarrival_factor: float = 1.0,
    seed: int = 0,
    slo: SloConfig | None = None,
) -> Workload:
    """The jobs of ``trace`` for ``cluster`` (see the module docstring for every rule)."""
    if skip < 0:
        raise ValueError(f"skip must be >= 0, got {skip}")
    if jobs is not None and jobs < 0:
        raise ValueError(f"jobs must be >= 0, got {jobs}")
    if not interarrival_factor > 0:
        raise ValueError(f"interarrival factor must be > 0, got {interarrival_factor}")
    slo = slo or SloConfig()
    stop = None if jobs is None else skip + jobs
    d = trace.data[skip:stop]
    order = np.lexsort((d[:, 0], d[:, 1]))
    d = d[order]
    n = d.shape[0]

    submit: F64 = d[:, 1].copy()
    if n and interarrival_factor != 1.0:
        submit = submit[0] + interarrival_factor * (submit - submit[0])
    run = d[:, 3].copy()
    req_procs, alloc_procs = d[:, 7], d[:, 4]
    procs = np.where(req_procs > 0, req_procs, alloc_procs).astype(np.int64)
    has_estimate = d[:, 8] >= 0
    estimate = np.where(has_estimate, d[:, 8], run)

    rng = seeds.stream(seed, seeds.WORKLOAD)
    factor = np.asarray(
        rng.uniform(slo.deadline_factor_min, slo.deadline_factor_max, n), dtype=np.float64
    )
    mem_fraction = np.asarray(
        rng.uniform(slo.memory_fraction_min, slo.memory_fraction_max, n), dtype=np.float64
    )
    node_mem = cluster.memory_per_host or DEFAULT_NODE_MEMORY_MIB
    used, requested = d[:, 6], d[:, 9]
    memory = np.where(
        used > 0,
        used / 1024.0,
        np.where(requested > 0, requested / 1024.0, mem_fraction * node_mem),
    )

    dropped: dict[str, int] = {}
    keep = np.ones(n, dtype=bool)

    def drop(reason: str, mask: npt.NDArray[np.bool_]) -> None:
        mask = mask & keep
        count = int(mask.sum())
        if count:
            dropped[reason] = count
            keep[mask] = False

    drop("negative_run_time", run < 0)
    drop("no_procs", procs <= 0)
    drop("too_many_procs", procs > cluster.total_cores)
    if cluster.memory_per_host is not None:
        mem_kib = np.ceil(memory * 1024 - 1e-9).astype(np.int64)
        host_kib = int(cluster.memory_kib())
        per_host = np.minimum(cluster.cores_per_host, host_kib // np.maximum(mem_kib, 1))
        capacity = cluster.hosts * np.where(mem_kib > 0, per_host, cluster.cores_per_host)
        drop("too_much_memory", procs > capacity)

    return Workload(
        job_id=d[keep, 0].astype(np.int64),
        submit=submit[keep],
        run=run[keep],
        estimate=estimate[keep],
        estimated=has_estimate[keep],
        procs=procs[keep],
        memory=memory[keep],
        deadline_factor=factor[keep],
        deadline=(submit + factor * np.maximum(run, 0))[keep],
        budget=(slo.budget_base / factor)[keep],
        dropped=dropped,
        user=d[keep, 11].astype(np.int64),
    )
