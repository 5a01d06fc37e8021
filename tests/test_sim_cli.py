"""``merkat sim run|compare|plot|lublin`` and ``merkat bench sim``, end to end on small traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.workload.lublin import write as write_lublin

runner = CliRunner()


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """300 Lublin jobs on 64 nodes (header MaxProcs 64)."""
    p = tmp_path / "small.swf"
    write_lublin(p, 300, seed=5, nodes=64)
    return p


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_run_writes_jobs_csv_and_summary(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run(
        "sim", "run", "--trace", str(small_trace), "--scheduler", "easy", "--out", str(out),
        "-o", "json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(stdout)
    assert summary == json.loads((out / "summary.json").read_text())
    for key in (
        "jobs", "dropped", "avg_wait_s", "avg_bounded_slowdown", "utilization", "makespan_s",
        "met_deadlines", "total_value", "wall_s", "jobs_per_s",
    ):  # fmt: skip
        assert key in summary
    assert summary["jobs"] == 300 and summary["cluster"]["total_cores"] == 64
    lines = (out / "jobs.csv").read_text().splitlines()
    assert lines[0] == "job_id,submit,start,end,procs,deadline,met,value"
    assert len(lines) == 301


def test_same_inputs_and_seed_give_byte_identical_jobs_csv(
    small_trace: Path, tmp_path: Path
) -> None:
    outs = []
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        out = tmp_path / name
        code, _, _ = run(
            "sim", "run", "--trace", str(small_trace), "--scheduler", "edf", "--out", str(out),
            "--seed", seed, "--interarrival-factor", "0.5", "--jobs", "200", "--skip", "10",
        )  # fmt: skip
        assert code == 0
        outs.append((out / "jobs.csv").read_bytes())
    assert outs[0] == outs[1]
    assert outs[0] != outs[2]  # other deadlines


def test_multi_host_run(small_trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "hosts"
    code, stdout, _ = run(
        "sim", "run", "--trace", str(small_trace), "--scheduler", "easy", "--out", str(out),
        "--hosts", "16", "--cores-per-host", "4", "--memory-per-host", "2048", "-o", "json",
    )  # fmt: skip
    assert code == 0
    summary = json.loads(stdout)
    assert summary["cluster"] == {
        "hosts": 16, "cores_per_host": 4, "memory_per_host_mib": 2048.0, "total_cores": 64,
    }  # fmt: skip
    assert summary["jobs"] + summary["dropped"] == 300


def test_compare_and_plot(small_trace: Path, tmp_path: Path) -> None:
    dirs = []
    for s in ("fcfs", "easy"):
        out = tmp_path / s
        assert (
            run("sim", "run", "--trace", str(small_trace), "--scheduler", s, "--out", str(out))[0]
            == 0
        )
        dirs.append(str(out))
    code, stdout, _ = run("sim", "compare", *dirs, "-o", "json")
    assert code == 0
    both = json.loads(stdout)
    assert [both[d]["scheduler"] for d in dirs] == ["fcfs", "easy"]
    code, stdout, _ = run("sim", "compare", *dirs)
    assert code == 0 and "avg_wait_s" in stdout
    code, stdout, _ = run("sim", "plot", dirs[1])
    assert code == 0
    for name in ("queue_length.png", "utilization.png", "wait_times.png"):
        png = Path(dirs[1]) / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--scheduler", "sjf"], "--scheduler must be one of"),
        (["--jobs", "0"], "--jobs must be >= 1"),
        (["--interarrival-factor", "0"], "--interarrival-factor must be in (0, 1000]"),
        (["--hosts", "2"], "--hosts and --cores-per-host go together"),
        (["--memory-per-host", "-5"], "--memory-per-host must be in (0, 1e+12]"),
    ],
)
def test_bad_flags_give_one_line_error_and_exit_2(
    small_trace: Path, tmp_path: Path, args: list[str], message: str
) -> None:
    base = ["sim", "run", "--trace", str(small_trace), "--out", str(tmp_path / "o")]
    if "--scheduler" not in args:
        base += ["--scheduler", "fcfs"]
    code, _, stderr = run(*base, *args)
    assert code == 2
    assert stderr.count("\n") == 1 and message in stderr


def test_bad_trace_line(tmp_path: Path) -> None:
    p = tmp_path / "bad.swf"
    p.write_text(
        "; MaxProcs: 4\n"
        "1 0 0 10 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
        "2 5 0 ten 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n"
    )
    code, stdout, _ = run(
        "sim", "run", "--trace", str(p), "--scheduler", "fcfs", "--out", str(tmp_path / "o"),
        "-o", "json",
    )  # fmt: skip
    assert code == 0 and json.loads(stdout)["skipped_lines"] == 1
    assert json.loads(stdout)["bad_lines"] == [f"{p}:3: field 4 (run_time) is not a number: 'ten'"]
    code, _, stderr = run(
        "sim", "run", "--trace", str(p), "--scheduler", "fcfs", "--out", str(tmp_path / "o"),
        "--force", "--strict",
    )  # fmt: skip
    assert code == 2
    assert stderr.strip() == f"error: {p}:3: field 4 (run_time) is not a number: 'ten'"


def test_missing_trace_and_missing_run_dir(tmp_path: Path) -> None:
    code, _, stderr = run(
        "sim", "run", "--trace", str(tmp_path / "none.swf"), "--scheduler", "fcfs",
        "--out", str(tmp_path / "o"),
    )  # fmt: skip
    assert code == 2 and "no such file" in stderr
    assert run("sim", "compare", str(tmp_path))[0] == 2
    assert run("sim", "plot", str(tmp_path))[0] == 2


def test_trace_without_maxprocs_needs_host_flags(tmp_path: Path) -> None:
    p = tmp_path / "nohdr.swf"
    p.write_text("1 0 0 10 2 -1 -1 2 -1 -1 1 1 1 -1 1 -1 -1 -1\n")
    code, _, stderr = run(
        "sim", "run", "--trace", str(p), "--scheduler", "fcfs", "--out", str(tmp_path / "o")
    )
    assert code == 2 and "MaxProcs" in stderr
    code, _, _ = run(
        "sim", "run", "--trace", str(p), "--scheduler", "fcfs", "--out", str(tmp_path / "o"),
        "--hosts", "1", "--cores-per-host", "4",
    )  # fmt: skip
    assert code == 0


def test_lublin_command_is_seeded(tmp_path: Path) -> None:
    a, b = tmp_path / "a.swf", tmp_path / "b.swf.gz"
    assert run("sim", "lublin", "--out", str(a), "--jobs", "50", "--seed", "9")[0] == 0
    assert run("sim", "lublin", "--out", str(b), "--jobs", "50", "--seed", "9")[0] == 0
    from merkat.workload.swf import read_swf

    assert read_swf(a).data.tolist() == read_swf(b).data.tolist()
    code, _, stderr = run("sim", "lublin", "--out", str(a), "--type", "weird")
    assert code == 2 and "--type" in stderr


def test_bench_sim_prints_json(small_trace: Path) -> None:
    code, stdout, _ = run(
        "bench",
        "sim",
        "--trace",
        str(small_trace),
        "--schedulers",
        "fcfs,edf,easy",
        "--repeat",
        "1",
    )
    assert code == 0
    data = json.loads(stdout)
    assert data["jobs"] == 300 and set(data["schedulers"]) == {"fcfs", "edf", "easy"}
    assert data["schedulers"]["easy"]["jobs_per_s"] > 0


def test_progress_bar_appears_only_after_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a terminal the bar appears after a second and is drawn by the calls (no refresh
    thread); in a file or a pipe it is never drawn."""
    import io
    import threading
    import time

    from rich.console import Console

    from merkat.cli import _common
    from merkat.cli._common import LazyProgress

    screen = io.StringIO()
    monkeypatch.setattr(_common, "err_console",
                        lambda: Console(file=screen, force_terminal=True, width=80))
    quick = LazyProgress(100, "sim", time.perf_counter())
    quick(50)
    assert quick.bar is None  # under a second: no bar
    threads = threading.active_count()
    slow = LazyProgress(100, "sim", time.perf_counter() - 2.0)
    slow(50)
    assert slow.bar and slow.done == 50
    assert threading.active_count() == threads  # (drawn by the calls, not by a thread)
    slow(50)
    slow.close()
    quick.close()
    assert "sim" in screen.getvalue() and "100/100 jobs" in screen.getvalue()
    monkeypatch.setattr(_common, "err_console",
                        lambda: Console(file=io.StringIO(), force_terminal=False))
    piped = LazyProgress(100, "sim", time.perf_counter() - 2.0)
    piped(50)
    piped(50)
    assert piped.bar is False  # (a transient bar shows nothing off a terminal)
    piped.close()


def test_plot_bins_are_time_averages() -> None:
    import numpy as np

    from merkat.sim.plots import _bin_means

    # 2 cores busy on [0, 5), then none: bins [0, 10) and [10, 20).
    got = _bin_means(np.array([0.0, 5.0]), np.array([2.0, -2.0]), np.array([0.0, 10.0, 20.0]))
    assert got.tolist() == [1.0, 0.0]


def test_a_scheduler_registered_by_name_runs_through_sim_run(tmp_path: Path) -> None:
    """merkat.sim.schedulers is the one registry of trace schedulers: an entry added there is
    accepted by `merkat sim run --scheduler NAME` and its outcome written like the others'."""
    from dataclasses import dataclass

    from merkat.sim.schedulers import SCHEDULERS, Batch

    names = SCHEDULERS.names
    assert names()[:4] == ("fcfs", "edf", "easy", "conservative") and "market" in names()
    assert SCHEDULERS["market"].market and not SCHEDULERS["edf"].market

    @dataclass(frozen=True)
    class FcfsAgain(Batch):
        """FCFS under another name."""

        def run(self, workload, cluster, opts, progress):  # type: ignore[no-untyped-def]
            return Batch("fcfs", "").run(workload, cluster, opts, progress)

    SCHEDULERS.register(FcfsAgain("fcfs-again", "FCFS under another name"))
    try:
        outs = {}
        for name in ("fcfs", "fcfs-again"):
            r = CliRunner().invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs",
                                         "50", "--scheduler", name, "--out", str(tmp_path / name)])
            assert r.exit_code == 0, r.stderr
            outs[name] = (tmp_path / name / "jobs.csv").read_bytes()
        assert outs["fcfs"] == outs["fcfs-again"]
        r = CliRunner().invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--scheduler",
                                     "fcfs-again", "--policy-param", "forecast=ar", "--out",
                                     str(tmp_path / "x")])
        assert r.exit_code == 2 and "only with --scheduler market" in r.stderr
    finally:
        SCHEDULERS.unregister("fcfs-again")
