"""The Lublin-Feitelson model: parameters, determinism, and agreement with lublin_256.swf."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from merkat.workload import lublin
from merkat.workload.swf import read_swf

TRACES = Path(__file__).resolve().parents[1].parent / "shared" / "traces"


@pytest.fixture
def reference() -> np.ndarray:
    p = TRACES / "lublin_256.swf"
    if not p.is_file():
        pytest.skip(f"{p} not found (CI clones shared/ beside the repo)")
    return read_swf(p).data


def stats(d: np.ndarray) -> dict[str, float]:
    size, run, submit = d[:, 4], d[:, 3], d[:, 1]
    gaps = np.diff(submit)
    hours = (submit % 86400) // 3600
    return {
        "serial": float(np.mean(size == 1)),
        "pow2": float(np.mean((size > 1) & (np.log2(size) % 1 == 0))),
        "median_size": float(np.median(size)),
        "mean_log_run": float(np.mean(np.log(run))),
        "median_run": float(np.median(run)),
        "median_gap": float(np.median(gaps)),
        "daytime": float(np.mean((hours >= 8) & (hours < 18))),
    }


def test_bucket_weights_have_mean_one_and_a_daytime_peak() -> None:
    w = lublin.bucket_weights(8.1737, 3.9631)
    assert w.shape == (48,) and w.mean() == pytest.approx(1.0)
    assert 20 <= int(np.argmax(w)) <= 34  # peak in the afternoon
    assert int(np.argmin(w)) == 10 and w[10] < 0.2  # quietest at 5 am (bucket 10)


def test_parameters_scale_with_the_machine() -> None:
    p = lublin.PARAMS["typeless"].for_nodes(256)
    assert p.uhi == 8 and p.umed == 5.5
    assert lublin.PARAMS["typeless"].for_nodes(128) == lublin.PARAMS["typeless"]


def test_same_seed_same_jobs() -> None:
    a = lublin.generate(500, seed=1, nodes=64)
    b = lublin.generate(500, seed=1, nodes=64)
    c = lublin.generate(500, seed=2, nodes=64)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


@pytest.mark.parametrize("jobtype", ["typeless", "mixed"])
def test_jobs_are_valid_swf(jobtype: str) -> None:
    d = lublin.generate(2000, seed=3, nodes=128, jobtype=jobtype)
    assert d.shape == (2000, 18)
    assert (d[:, 0] == np.arange(1, 2001)).all()
    assert (np.diff(d[:, 1]) >= 0).all()  # submit times never decrease
    assert (d[:, 3] >= 1).all() and (d[:, 3] <= 162755).all()
    assert (d[:, 4] >= 1).all() and (d[:, 4] <= 128).all()
    assert (d[:, 10] == 1).all()
    unset = np.delete(np.arange(18), [0, 1, 3, 4, 10, 14])
    assert (d[:, unset] == -1).all()
    kinds = set(d[:, 14].tolist())
    assert kinds == ({0.0} if jobtype == "typeless" else {1.0, 2.0})


def test_matches_the_reference_log_in_summary_statistics(reference: np.ndarray) -> None:
    ref = stats(reference)
    ours = stats(np.concatenate([lublin.generate(10000, seed=s, nodes=256) for s in (1, 2)]))
    assert ours["serial"] == pytest.approx(ref["serial"], abs=0.015)
    assert ours["pow2"] == pytest.approx(ref["pow2"], abs=0.02)
    assert ours["median_size"] == ref["median_size"]
    assert ours["mean_log_run"] == pytest.approx(ref["mean_log_run"], abs=0.15)
    assert ours["median_run"] == pytest.approx(ref["median_run"], rel=0.15)
    assert ours["median_gap"] == pytest.approx(ref["median_gap"], rel=0.1)
    assert ours["daytime"] == pytest.approx(ref["daytime"], abs=0.05)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        lublin.generate(-1)
    with pytest.raises(ValueError):
        lublin.generate(10, nodes=1)
    with pytest.raises(ValueError):
        lublin.generate(10, jobtype="weird")


@pytest.mark.parametrize("nodes", [2, 3, 4, 8, 9, 16])
def test_small_machines_keep_the_size_range_ordered(nodes: int) -> None:
    p = lublin.PARAMS["typeless"].for_nodes(nodes)
    assert p.ulow <= p.umed <= p.uhi
    jobs = lublin.generate(500, seed=1, nodes=nodes)
    size = jobs[:, 4]
    assert size.min() >= 1 and size.max() <= nodes
    assert (size == 1).any() and (size > 1).any()


@pytest.mark.parametrize("nodes", [2, 4, 8, 9])
def test_small_machines_generate_jobs_that_fit(nodes: int) -> None:
    """``generate(nodes=8)`` used to fail with "high - low < 0" (UMed under ULow for N <= 9)."""
    jobs = lublin.generate(300, seed=0, nodes=nodes)
    procs = jobs[:, 4]
    assert jobs.shape == (300, 18) and procs.min() >= 1 and procs.max() <= nodes
