"""From trace records to jobs: procs, estimates, memory, drops, load scaling, SLO attributes."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.workload.cluster import Cluster
from merkat.workload.jobs import SloConfig, build_workload
from merkat.workload.swf import SwfTrace


def trace(rows: list[dict[int, float]]) -> SwfTrace:
    """An in-memory trace; each row gives {field number (1-based): value}, the rest is -1."""
    data = np.full((len(rows), 18), -1.0)
    for i, r in enumerate(rows):
        for k, v in r.items():
            data[i, k - 1] = v
    return SwfTrace(header={"MaxProcs": "8"}, data=data)


def job(jid: int, submit: float, run: float, procs: int, **extra: float) -> dict[int, float]:
    row = {1: jid, 2: submit, 4: run, 8: procs}
    names = {"alloc": 5, "used_mem": 7, "req_time": 9, "req_mem": 10}
    for k, v in extra.items():
        row[names[k]] = v
    return row


def test_procs_estimate_and_queue_order() -> None:
    tr = trace(
        [
            job(2, 10, 100, 4, req_time=200),
            job(1, 10, 50, -1, alloc=3),  # no requested procs: allocated ones
            job(3, 5, 70, 2),  # no requested time: estimate = run time
        ]
    )
    wl = build_workload(tr, Cluster.pool(8))
    assert wl.job_id.tolist() == [3, 1, 2]  # (submit, id)
    assert wl.procs.tolist() == [2, 3, 4]
    assert wl.estimate.tolist() == [70, 50, 200]
    assert wl.run.tolist() == [70, 50, 100]


def test_drops_are_counted_by_reason() -> None:
    tr = trace(
        [
            job(1, 0, -1, 2),
            job(2, 1, 10, -1, alloc=-1),
            job(3, 2, 10, 9),
            job(4, 3, 10, 2),
        ]
    )
    wl = build_workload(tr, Cluster.pool(8))
    assert wl.job_id.tolist() == [4]
    assert wl.dropped == {"negative_run_time": 1, "no_procs": 1, "too_many_procs": 1}
    assert wl.dropped_total == 3


def test_memory_from_trace_or_drawn_and_too_much_memory_dropped() -> None:
    tr = trace(
        [
            job(1, 0, 10, 1, used_mem=512 * 1024),  # 512 MiB used
            job(2, 1, 10, 1, req_mem=256 * 1024),  # only requested: 256 MiB
            job(3, 2, 10, 1),  # none: drawn in [10 %, 90 %] of 1000 MiB
            job(4, 3, 10, 1, used_mem=2000 * 1024),  # more than a host: dropped
            job(5, 4, 10, 4, used_mem=600 * 1024),  # 4 tasks of 600 MiB on 2 hosts of 1000
        ]
    )
    wl = build_workload(tr, Cluster(2, 4, 1000))
    assert wl.job_id.tolist() == [1, 2, 3]
    assert wl.memory[:2].tolist() == [512, 256]
    assert 100 <= wl.memory[2] <= 900
    assert wl.dropped == {"too_much_memory": 2}


def test_skip_jobs_and_interarrival_factor() -> None:
    tr = trace([job(i, 100 + 10 * i, 5, 1) for i in range(1, 11)])
    wl = build_workload(tr, Cluster.pool(8), skip=2, jobs=5, interarrival_factor=0.5)
    assert wl.job_id.tolist() == [3, 4, 5, 6, 7]
    assert wl.submit.tolist() == [130, 135, 140, 145, 150]  # gaps of 10 s halved


def test_slo_attributes_follow_the_papers() -> None:
    tr = trace([job(i, i, 100, 1) for i in range(1, 2001)])
    wl = build_workload(tr, Cluster.pool(8), seed=7)
    f = wl.deadline_factor
    assert f.min() >= 1.2 and f.max() <= 10 and 5 < f.mean() < 6.2
    assert np.allclose(wl.deadline, wl.submit + f * wl.run)
    assert np.allclose(wl.budget, 60 / f)
    custom = build_workload(tr, Cluster.pool(8), seed=7, slo=SloConfig(2, 3, 30))
    assert custom.deadline_factor.min() >= 2 and custom.deadline_factor.max() <= 3
    assert np.allclose(custom.budget, 30 / custom.deadline_factor)


def test_same_seed_same_jobs_and_other_seed_other_draws() -> None:
    tr = trace([job(i, i, 100, 1) for i in range(1, 101)])
    a = build_workload(tr, Cluster.pool(8), seed=3)
    b = build_workload(tr, Cluster.pool(8), seed=3)
    c = build_workload(tr, Cluster.pool(8), seed=4)
    assert np.array_equal(a.deadline, b.deadline) and np.array_equal(a.memory, b.memory)
    assert not np.array_equal(a.deadline, c.deadline)


def test_attributes_do_not_depend_on_dropped_jobs() -> None:
    rows = [job(i, i, 100, 1) for i in range(1, 11)]
    wl_all = build_workload(trace(rows), Cluster.pool(8), seed=1)
    rows[4] = job(5, 5, -1, 1)  # job 5 now dropped
    wl_some = build_workload(trace(rows), Cluster.pool(8), seed=1)
    keep = wl_all.job_id != 5
    assert np.array_equal(wl_some.deadline_factor, wl_all.deadline_factor[keep])


@pytest.mark.parametrize("kwargs", [{"skip": -1}, {"jobs": -1}, {"interarrival_factor": 0}])
def test_bad_options(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        build_workload(trace([job(1, 0, 1, 1)]), Cluster.pool(8), **kwargs)  # type: ignore[arg-type]


def test_cluster_validation() -> None:
    with pytest.raises(ValueError, match="hosts"):
        Cluster(0, 1)
    with pytest.raises(ValueError, match="cores"):
        Cluster(1, 0)
    with pytest.raises(ValueError, match="memory"):
        Cluster(1, 1, 0)


def test_csv_number_format() -> None:
    from merkat.sim.metrics import _num

    assert [_num(v) for v in (1.0, 1.0000001, 2.5, -1e-7, 342072.123456789)] == [
        "1", "1", "2.5", "0", "342072.123457",
    ]  # fmt: skip
