"""Moldable trace jobs (``merkat sim run --moldable``): Amdahl's speed-up model, the model's
progress over a period, one job that the combined controller saves by adding VMs where the
rigid job misses, the horizontal policies on a small Lublin trace, and the refusal without
the option."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.workload import lublin
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat.moldable import (
    MoldableApp,
    amdahl,
    check_serial,
    max_vms,
    relative_rate,
)
from merkat.worlds.merkat.trace import MarketConfig, simulate_market

runner = CliRunner()


def test_amdahls_speed_up_and_the_rate_relative_to_the_requested_size() -> None:
    assert amdahl(1, 0.05) == 1.0
    assert amdahl(4, 0.05) == pytest.approx(1 / (0.05 + 0.95 / 4))  # 3.478
    assert amdahl(4, 0.0) == 4.0 and amdahl(0, 0.05) == 0.0
    assert relative_rate(4, 4, 0.05) == 1.0  # on the size it asked for: as the trace says
    assert relative_rate(2, 4, 0.05) == pytest.approx(1.904762 / 3.478261, rel=1e-6)
    assert relative_rate(8, 4, 0.0) == 2.0  # no serial part: twice the VMs, twice the rate
    assert relative_rate(8, 4, 0.5) == pytest.approx((1 / 0.5625) / 1.6)  # 1.11: saturates
    assert max_vms(3) == 6
    for bad in (-0.1, 1.0, float("nan")):
        with pytest.raises(ValueError, match="serial fraction"):
            check_serial(bad)


def _vm(ready_at: float) -> SimpleNamespace:
    return SimpleNamespace(ready_at=ready_at)


class _Backend:
    """Every VM at full speed (the simulated backend's speed without migrations)."""

    @staticmethod
    def speed(model: object, vm: object, t0: float, t1: float) -> float:
        return 1.0


def test_progress_is_piecewise_on_the_vms_that_are_ready() -> None:
    job = MoldableApp(procs=2, work_total=100.0, serial=0.0)
    job.advance(_Backend(), [("a", _vm(0.0)), ("b", _vm(10.0))], 0.0, 40.0)
    assert job.work_done == pytest.approx(10 * 0.5 + 30 * 1.0)  # 1 VM, then both
    assert job.last_rate == pytest.approx(35 / 40)
    four = [(v, _vm(0.0)) for v in "abcd"]
    job.advance(_Backend(), four, 40.0, 80.0)  # 65 left at rate 2: done 32.5 s later
    assert job.finish_time == pytest.approx(72.5) and job.work_done == 100.0


def one_job(run: float, factor: float, procs: int = 2) -> Workload:
    return Workload(job_id=np.array([1]), submit=np.array([0.0]), run=np.array([run]),
                    estimate=np.array([run]), procs=np.array([procs]),
                    memory=np.array([100.0]), deadline_factor=np.array([factor]),
                    deadline=np.array([run * factor]), budget=np.array([60.0]))


def _run(policy: str, moldable: bool, factor: float) -> tuple[bool, float, list[int]]:
    out = simulate_market(one_job(3000.0, factor), Cluster(1, 8),
                          MarketConfig(policy=policy, moldable=moldable, boot_s=0.0,
                                       resume_s=0.0))
    assert out.audit_ok
    return bool(out.met[0]), float(out.end[0]), [r.vms for r in out.records]


def test_combined_adds_vms_at_maximum_and_meets_a_deadline_the_rigid_job_misses() -> None:
    # 3,000 s of work on 2 processes, deadline 2,400 s: on 2 VMs it cannot be met
    met, end, _ = _run("merkat-vertical", False, 0.8)
    assert not met and end == 3000.0
    met, end, vms = _run("merkat-combined", True, 0.8)
    assert met and vms[:3] == [2, 3, 3]
    # 300 s on 2 VMs, 1,500 s on 3 (rate S(3)/S(2) = 1.4318), then 2 VMs again (shed once
    # ahead of the reference): 300 + 2147.73 then 552.27 s at rate 1
    assert end == pytest.approx(1800 + (3000 - 300 - 1500 * amdahl(3, .05) / amdahl(2, .05)))


def test_horizontal_sheds_to_one_vm_with_a_loose_deadline() -> None:
    met, end, vms = _run("merkat-horizontal", True, 10.0)
    assert met and vms[:2] == [2, 1] and max(vms[1:]) == 1
    assert end == pytest.approx(300 + 2700 / relative_rate(1, 2, 0.05))  # 5,442.86 s


@pytest.fixture(scope="module")
def small_trace(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = tmp_path_factory.mktemp("moldable") / "lublin.swf"
    lublin.write(path, 30, 1, 16)
    return str(path)


def sim(trace: str, out: Path, *extra: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["sim", "run", "--trace", trace, "--scheduler", "market",
                            "--hosts", "2", "--cores-per-host", "8", "--period", "60",
                            "--out", str(out), *extra])
    return r.exit_code, r.stdout, r.stderr


@pytest.mark.parametrize("policy", ["merkat-horizontal", "scale-multi-vms", "merkat-combined"])
def test_horizontal_policies_run_on_a_moldable_trace(small_trace: str, tmp_path: Path,
                                                     policy: str) -> None:
    code, out, err = sim(small_trace, tmp_path / "o", "--policy", policy, "--moldable",
                         "--serial-fraction", "0.1", "-o", "json")
    assert code == 0, err
    s = json.loads(out)
    assert s["jobs"] == 30 and s["policy"] == policy and s["ledger_audit_ok"]
    assert s["moldable"] == {"speedup": "amdahl", "serial_fraction": 0.1,
                             "max_vms": "2 x procs"}
    assert sum(s["outcomes"].values()) == 30 and s["met_deadlines"] > 0
    assert s["max_cores_allocated"] <= 16 + 1e-9


def test_without_moldable_the_refusal_names_the_option(small_trace: str, tmp_path: Path) -> None:
    code, _, err = sim(small_trace, tmp_path / "o", "--policy", "merkat-combined")
    assert code == 2 and "add --moldable" in err and "rigid jobs of a trace" in err
    assert "Traceback" not in err
    # a policy no trace job can use (it needs a task queue) gets no such hint
    code, _, err = sim(small_trace, tmp_path / "o", "--policy", "horizontal-deadline",
                       "--moldable")
    assert code == 2 and "moldable jobs of a trace" in err and "add --moldable" not in err


@pytest.mark.parametrize(("extra", "message"), [
    (("--serial-fraction", "0.1"), "--serial-fraction: only with --moldable"),
    (("--moldable", "--serial-fraction", "1"), "--serial-fraction must be in [0, 1)"),
    (("--moldable", "--serial-fraction", "nan"), "--serial-fraction must be in [0, 1)"),
])
def test_bad_serial_fraction_is_a_one_line_error(small_trace: str, tmp_path: Path,
                                                 extra: tuple[str, ...], message: str) -> None:
    code, _, err = sim(small_trace, tmp_path / "o", *extra)
    assert code == 2 and message in err


def test_moldable_is_a_market_option(small_trace: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "--trace", small_trace, "--scheduler", "easy",
                            "--out", str(tmp_path / "o"), "--moldable"])
    assert r.exit_code == 2 and "--moldable: only with --scheduler market" in r.stderr
