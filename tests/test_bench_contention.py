"""``merkat bench contention``: the period-drift and quantile arithmetic (exact numbers), its
bad flags, and (root, slow) a short real run against a real server."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from merkat.backends.local.cgroups import detect
from merkat.bench.contention import drift, quantile

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def test_drift_is_the_mean_lateness_on_the_loops_own_schedule() -> None:
    # due at 2, 4, 6, 8, 10, 12: late 0.1, 0.05, 0.5, 1.0, 0, 0 (2 s periods)
    h = [{"time": t} for t in (0.0, 2.1, 4.05, 6.5, 9.0, 10.0, 12.0)]
    d = drift(h, 2.0, 0.0)
    assert d == {"period_drift": round(1.65 / 6 / 2, 4), "period_late_max_s": 1.0,
                 "periods_missed": 0, "periods": 6}
    # only the periods since the measurement began count
    assert drift(h, 2.0, 9.5)["periods"] == 2 and drift(h, 2.0, 9.5)["period_drift"] == 0.0


def test_a_missed_boundary_moves_the_schedule_as_the_server_does() -> None:
    # the period at 5.5 was due at 2 (a whole period late: 3.5 s): the boundary at 4 was
    # never run, and the next one is due a period after that start (7.5), not at 6
    h = [{"time": t} for t in (0.0, 5.5, 7.6, 9.5)]
    d = drift(h, 2.0, 0.0)
    assert d["periods_missed"] == 1
    assert d["period_late_max_s"] == 3.5
    assert d["period_drift"] == round((3.5 + 0.1 + 0.0) / 3 / 2, 4)


def test_quantiles() -> None:
    assert quantile([], 0.95) is None
    assert quantile([3.0], 0.5) == 3.0
    xs = [float(x) for x in range(1, 101)]
    assert quantile(xs, 0.5) == pytest.approx(50.5)
    assert quantile(xs, 0.95) == pytest.approx(95.05)


@pytest.mark.parametrize(("args", "word"), [
    (["--scenario", "nope"], "--scenario"), (["--duration", "1"], "--duration"),
    (["--period", "0"], "--period"), (["--reserve-cpu", "-1"], "--reserve-cpu")])
def test_bad_flags_are_exit_2_naming_the_flag(args: list[str], word: str) -> None:
    r = subprocess.run([sys.executable, "-m", "merkat", "bench", "contention", *args],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 2 and word in r.stderr and "Traceback" not in r.stderr


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_a_short_load_run_against_a_real_server(cpu_heavy: int) -> None:
    r = subprocess.run([sys.executable, "-m", "merkat", "bench", "contention", "--duration",
                        "5", "--period", "1", "-o", "json"],
                       capture_output=True, text=True, env=ENV, timeout=240)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    cores = len(os.sched_getaffinity(0))
    assert (out["allocatable_cpu"], out["reserve_cpu"]) == (cores - 0.5, 0.5)
    assert out["vms"] == math.ceil(2 * out["allocatable_cpu"]) == out["vms_running_at_end"]
    assert out["cli_calls"] >= 3 and out["cli_calls"] % 3 == 0 and out["cli_errors"] == 0
    assert 0 < out["cli_p50_s"] <= out["cli_p95_s"] <= out["cli_max_s"]
    assert out["api_calls"] > 0 and out["api_errors"] == 0
    assert 0 < out["api_p50_s"] <= out["api_p95_s"]
    assert out["periods"] >= 3 and out["period_drift"] >= 0
    assert out["enforced"] is True
