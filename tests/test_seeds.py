"""One seed per run, named streams (``merkat.seeds``): stable, independent, and wired so that
adding an application shifts no other application's draws (docs/architecture.md,
"Determinism")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from merkat import seeds
from merkat.cli import app
from merkat.control.registry import make_policy
from merkat.workload.jobs import Workload
from merkat.workload.traces import HPC2N, find_trace
from merkat.worlds.merkat.scenarios import Scenario, spec
from merkat.worlds.merkat.trace import MarketConfig, _TraceArrivals

# A change of these numbers changes every seeded result: it must be deliberate.
PINNED = {
    "workload": 4058335883,
    "controllers/1": 1667344143,
    "arrivals": 844774806,
    "deadline-factors": 4220183848,
    "policies": 1207695718,
    "ties": 2427179951,
    "condor-tasks": 1195658305,
    "user/3": 21244479,
    "window/normal": 2591202638,
}


def first(seed: int, name: str) -> int:
    return int(seeds.stream(seed, name).integers(0, 2**32))


def test_each_name_gives_its_pinned_draw() -> None:
    assert {name: first(7, name) for name in PINNED} == PINNED


def test_the_workload_stream_is_default_rng_of_the_seed() -> None:
    """The decision that keeps the trace results quoted before the streams: the root."""
    for seed in (0, 1, 7, 2**32 - 1):
        assert np.array_equal(seeds.stream(seed, "workload").random(50),
                              np.random.default_rng(seed).random(50))


def test_a_numbered_part_is_the_spawned_child_of_its_parent() -> None:
    child = seeds.sequence(5, "user").spawn(4)[3]
    assert np.array_equal(np.random.default_rng(child).random(5),
                          seeds.stream(5, "user/3").random(5))
    assert seeds.controller(5, "42").spawn_key == seeds.sequence(5, "controllers/42").spawn_key


NAMES = st.text(alphabet="abcdefghij-0123456789", min_size=1, max_size=12).filter(
    lambda s: "//" not in s and not s.startswith("/") and not s.endswith("/"))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32 - 1), NAMES, NAMES)
def test_different_names_draw_differently(seed: int, a: str, b: str) -> None:
    same = [seeds.stable_id(p) for p in a.split("/")] == [seeds.stable_id(p)
                                                          for p in b.split("/")]
    draws_a = seeds.stream(seed, a).integers(0, 2**63, 4)
    draws_b = seeds.stream(seed, b).integers(0, 2**63, 4)
    assert np.array_equal(draws_a, draws_b) == same
    assert not np.array_equal(draws_a, seeds.stream(seed + 1, a).integers(0, 2**63, 4))


def test_streams_do_not_depend_on_the_process_or_its_hash_salt() -> None:
    code = ("from merkat import seeds; "
            "print([int(seeds.stream(7, n).integers(0, 2**32)) for n in "
            f"{sorted(PINNED)!r}])")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert json.loads(out) == [PINNED[n] for n in sorted(PINNED)]


@pytest.mark.parametrize("seed", [-1, 1.5, True, "3"])
def test_a_seed_is_a_non_negative_integer(seed: object) -> None:
    with pytest.raises(ValueError, match="non-negative integer"):
        seeds.sequence(seed, "workload")  # type: ignore[arg-type]


def test_an_empty_part_is_refused() -> None:
    with pytest.raises(ValueError, match="empty part"):
        seeds.stream(0, "user//3")


def controller_draws(job_ids: list[int], seed: int) -> dict[str, list[int]]:
    """Each trace job's controller, as the market run builds it, and its first draws."""
    n = len(job_ids)
    w = Workload.from_arrays(submit=[10.0 * k for k in range(n)], run=[600.0] * n,
                             procs=[1] * n, deadline_factor=[2.0] * n, job_id=job_ids)
    ids = [str(j) for j in w.job_id.tolist()]
    arrivals = _TraceArrivals(w, 0, ids, ("deadline-strict",) * n, MarketConfig(), ("cpu",),
                              seed)
    out = {}
    for a in arrivals.due(float("inf")):
        assert a.spec is not None
        ctl = make_policy(a.spec.policy, **dict(a.spec.params))
        out[a.spec.id] = ctl.rng.integers(0, 2**32, 3).tolist()
    return out


def test_adding_a_job_does_not_shift_another_controllers_draws() -> None:
    two = controller_draws([10, 20], seed=3)
    three = controller_draws([10, 15, 20], seed=3)
    assert three["10"] == two["10"] and three["20"] == two["20"]
    assert len({tuple(v) for v in three.values()}) == 3  # each its own stream
    assert two["20"] == seeds.stream(3, "controllers/20").integers(0, 2**32, 3).tolist()
    # the run's seed reaches the controllers (it was ignored before the streams)
    assert controller_draws([10, 20], seed=4)["20"] != two["20"]


def test_scenario_controllers_draw_from_their_own_streams() -> None:
    sc = Scenario(hosts=1, cores=1.0, seed=9)
    for app_id in ("a", "b"):
        sc.add(spec(app_id, "deadline-strict", budget=10.0), model=None)  # type: ignore[arg-type]
    got = {a.spec.id: make_policy(a.spec.policy, **dict(a.spec.params)).rng.random()
           for a in sc._pending if a.spec is not None}
    assert got == {k: seeds.stream(9, f"controllers/{k}").random() for k in ("a", "b")}


def test_the_same_seed_gives_byte_identical_sim_run_files(tmp_path: Path) -> None:
    try:
        trace = str(find_trace(HPC2N))
    except FileNotFoundError as exc:  # pragma: no cover - CI has the bundled trace
        pytest.skip(str(exc))
    runner = CliRunner()

    def run(name: str, seed: int) -> Path:
        out = tmp_path / name
        r = runner.invoke(app, ["sim", "run", "--trace", trace, "--jobs", "15", "--scheduler",
                                "market", "--seed", str(seed), "--out", str(out), "-o", "json"])
        assert r.exit_code == 0, r.stderr
        return out

    a, b, c = run("a", 3), run("b", 3), run("c", 4)
    assert (a / "jobs.csv").read_bytes() == (b / "jobs.csv").read_bytes()
    sa, sb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    for timing in ("wall_s", "simulate_s", "jobs_per_s"):  # measurements of the machine
        sa.pop(timing), sb.pop(timing)
    assert sa == sb
    assert (c / "jobs.csv").read_bytes() != (a / "jobs.csv").read_bytes()


def test_a_trace_controller_makes_its_generator_on_its_first_draw() -> None:
    """A trace job's controller is given its stream unmade (``seeds.Stream``): no generator
    until it draws, then the very draws of ``seeds.stream`` (the ~35 µs a job it saves must
    not move a single draw)."""
    lazy = make_policy("deadline-strict", seed=seeds.controller_stream(5, "42"))
    assert lazy._rng is None  # nothing made yet
    eager = make_policy("deadline-strict", seed=seeds.controller(5, "42"))
    assert eager._rng is not None
    assert lazy.rng.integers(0, 2**32, 4).tolist() == eager.rng.integers(0, 2**32, 4).tolist()
    assert lazy.rng is lazy.rng  # made once, then kept
    assert lazy.rng.random() == eager.rng.random()  # (kept: the next draws in step)
    assert seeds.stream(5, "controllers/42").integers(0, 2**32, 4).tolist() == \
        make_policy("deadline-strict", seed=seeds.controller_stream(5, "42")).rng.integers(
            0, 2**32, 4).tolist()
    with pytest.raises(ValueError, match="non-negative"):
        seeds.controller_stream(-1, "42")
    from merkat.control.registry import PolicyError
    with pytest.raises(PolicyError):  # a bad seed of another kind is refused at once
        make_policy("deadline-strict", seed=-3)
