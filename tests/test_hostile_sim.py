"""Hostile input against the simulator's commands (issue 18, items 4, 5, 7, 8, 9): float
flags finite and in range, outputs atomic and never silently overwritten, garbage and corrupt
traces, gzip bombs, NaN-free JSON, the trace's full path and checksum in the results; and a
hypothesis fuzz of the CLI's argument parsing (never a traceback, exit codes 0/1/2 only)."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from merkat.cli import app
from merkat.cli._common import print_json
from merkat.workload import swf
from merkat.workload.swf import SwfError

runner = CliRunner()
TRACE = "HPC2N-2002-2.2-cln"


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


def one_line_error(code: int, err: str, expected: int = 2) -> None:
    assert code == expected, err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    "flags",
    [
        ("--scheduler", "easy", "--interarrival-factor", "inf"),
        ("--scheduler", "edf", "--interarrival-factor", "nan"),
        ("--scheduler", "conservative", "--interarrival-factor", "1e999"),
        ("--scheduler", "fcfs", "--interarrival-factor", "inf"),
        ("--scheduler", "market", "--period", "inf"),
        ("--scheduler", "market", "--period", "0.001"),
        ("--scheduler", "easy", "--budget-base", "0"),
        ("--scheduler", "easy", "--budget-base", "inf"),
        ("--scheduler", "easy", "--budget-base", "1e300"),
        ("--scheduler", "easy", "--memory-per-host", "inf", "--hosts", "4", "--cores-per-host", "64"),
        ("--scheduler", "easy", "--deadline-factor-max", "inf"),
        ("--scheduler", "easy", "--hosts", "100000000", "--cores-per-host", "1"),
        ("--scheduler", "easy", "--seed", "-1"),
    ],
)  # fmt: skip
def test_float_and_range_flags_refused_before_running(
    tmp_path: Path, flags: tuple[str, ...]
) -> None:
    code, out, err = run("sim", "run", "--trace", TRACE, "--out", str(tmp_path / "o"), *flags)
    one_line_error(code, err)
    assert out == "" and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "sim", "--cores", "-5"),
        ("bench", "sim", "--cores", "0"),
        ("bench", "period", "--interarrival-factor", "inf"),
        ("bench", "period", "--seed", "-1"),
        ("bench", "period", "--admission", "-1"),
        ("bench", "sweep", "--workers", "0"),
        ("bench", "sweep", "--jobs", "0"),
        ("bench", "sweep", "--factors", "x"),
        ("bench", "sweep", "--factors", "0"),
        ("bench", "sweep", "--target", "0"),
        ("sim", "lublin", "--out", "x.swf", "--seed", "-1"),
        ("bench", "market", "--vms", "100000000"),  # filled 24 GiB
        ("bench", "market", "--vms", "10", "--hosts", "0"),
        ("bench", "market", "--seed", "-1"),  # was an internal error, exit 1
        ("bench", "gridcloud", "--seed", "-1"),
        ("bench", "gridcloud", "--tasks", "100000000"),  # out of memory
        ("bench", "gridcloud", "--scale-tasks", "100000000"),
        ("bench", "gridcloud", "--scales", "1,100000000"),  # never ended
    ],
)
def test_bench_and_lublin_flags(args: tuple[str, ...]) -> None:
    code, _, err = run(*args)
    one_line_error(code, err)


def test_out_refused_when_not_empty_and_replaced_whole_with_force(tmp_path: Path) -> None:
    out = tmp_path / "run"
    base = ("sim", "run", "--trace", TRACE, "--out", str(out), "-o", "json")
    code, _, err = run(*base, "--scheduler", "easy", "--jobs", "100")
    assert code == 0, err
    first = json.loads((out / "summary.json").read_text())
    code, _, err = run(*base, "--scheduler", "fcfs", "--jobs", "50")
    one_line_error(code, err)
    assert "not empty" in err and json.loads((out / "summary.json").read_text()) == first
    code, _, err = run(*base, "--scheduler", "fcfs", "--jobs", "50", "--force")
    assert code == 0, err
    second = json.loads((out / "summary.json").read_text())
    assert second["scheduler"] == "fcfs" and second["jobs"] == 50
    assert sorted(p.name for p in out.iterdir()) == ["jobs.csv", "summary.json"]
    assert len((out / "jobs.csv").read_text().splitlines()) == 51
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary left behind
    # the trace recorded by its full path and checksum
    path = Path(second["trace"])
    assert path.is_absolute() and path.name == "HPC2N-2002-2.2-cln.swf.gz"
    assert second["trace_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    # an --out that is a file: refused before the run
    f = tmp_path / "file"
    f.write_text("x")
    code, _, err = run("sim", "run", "--trace", TRACE, "--scheduler", "easy", "--out", str(f))
    one_line_error(code, err)
    assert f.read_text() == "x"


def test_interrupted_run_leaves_the_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    assert (
        run(
            "sim", "run", "--trace", TRACE, "--scheduler", "easy", "--jobs", "60", "--out", str(out)
        )[0]
        == 0
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    import merkat.sim.run as simrun

    def boom(*_a: object, **_k: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(simrun, "write_jobs_csv", boom)
    r = runner.invoke(
        app,
        [
            "sim",
            "run",
            "--trace",
            TRACE,
            "--scheduler",
            "fcfs",
            "--jobs",
            "50",
            "--out",
            str(out),
            "--force",
        ],
    )
    assert r.exit_code != 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["run"]


def _garbage(tmp_path: Path) -> dict[str, bytes]:
    good = Path("/work/shared/traces") / "lublin_256.swf"
    raw = good.read_bytes() if good.exists() else b"1 0 0 10 1 -1 -1 1 10 -1 1 1 1 1 1 -1 -1 -1\n"
    gz = gzip.compress(raw)
    return {
        "binary.swf": bytes(range(256)) * 8,
        "utf16.swf": "; Version: 2\n1 0 0 10 1\n".encode("utf-16"),
        "bad.swf": b"hello world\nnot a trace\n",
        "empty.swf": b"",
        "corrupt.swf.gz": gz[: len(gz) // 2],
        "junk.swf.gz": b"\x1f\x8b" + b"\x00" * 50,
    }


@pytest.mark.parametrize(
    "name", ["binary.swf", "utf16.swf", "bad.swf", "empty.swf", "corrupt.swf.gz", "junk.swf.gz"]
)
def test_garbage_traces_are_one_line_errors(tmp_path: Path, name: str) -> None:
    f = tmp_path / name
    f.write_bytes(_garbage(tmp_path)[name])
    for cmd in (
        ("sim", "run", "--trace", str(f), "--scheduler", "fcfs", "--out", str(tmp_path / "o")),
        ("bench", "sim", "--trace", str(f), "--cores", "8", "--repeat", "1"),
    ):
        code, out, err = run(*cmd)
        one_line_error(code, err)
        assert out == "" and not (tmp_path / "o").exists()


def test_gzip_named_swf_is_read(tmp_path: Path) -> None:
    f = tmp_path / "t.swf"
    f.write_bytes(gzip.compress(b"1 0 0 10 2 -1 -1 2 20 -1 1 1 1 1 1 -1 -1 -1\n" * 3))
    assert len(swf.read_swf(f)) == 3


def test_gzip_bomb_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "bomb.swf.gz"
    f.write_bytes(gzip.compress(b"\x00" * (8 << 20)))  # 8 MiB of zeros in ~8 KiB
    monkeypatch.setattr(swf, "MAX_TRACE_BYTES", 4 << 20)
    with pytest.raises(SwfError, match="decompresses to more than 4 MiB"):
        swf.read_swf(f)


def test_json_output_never_has_nan(capsys: pytest.CaptureFixture[str]) -> None:
    print_json({"a": math.nan, "b": [math.inf, -math.inf, 1.5], "c": {"d": math.nan}})
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(c))
    assert doc == {"a": None, "b": [None, None, 1.5], "c": {"d": None}}


def test_compare_and_plot_on_broken_runs(tmp_path: Path) -> None:
    out = tmp_path / "r"
    assert (
        run(
            "sim", "run", "--trace", TRACE, "--scheduler", "easy", "--jobs", "80", "--out", str(out)
        )[0]
        == 0
    )
    (out / "jobs.csv").write_text((out / "jobs.csv").read_text()[:200])
    one_line_error(*run("sim", "plot", str(out))[::2])
    (out / "summary.json").write_bytes(b"\xff\xfe{")
    one_line_error(*run("sim", "compare", str(out))[::2])


# --- fuzz of the CLI's argument parsing ---------------------------------------------------

FLAGS = [
    "--interarrival-factor", "--period", "--budget-base", "--memory-per-host", "--hosts",
    "--cores-per-host", "--jobs", "--skip", "--seed", "--workers", "--deadline-factor-min",
    "--deadline-factor-max", "--scheduler", "-o",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(["inf", "-inf", "nan", "1e999", "-1", "0", "1e300", "0.001", "abc", "", "[/]"]),
    st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.text(max_size=8),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pairs=st.lists(st.tuples(st.sampled_from(FLAGS), VALUES), min_size=1, max_size=3))
def test_fuzz_sim_run_arguments(tmp_path: Path, pairs: list[tuple[str, str]]) -> None:
    args = ["sim", "run", "--trace", TRACE, "--scheduler", "fcfs", "--jobs", "20"]
    for flag, value in pairs:
        args += [flag, value]
    out = tmp_path / "fuzz"
    r = runner.invoke(app, [*args, "--out", str(out), "--force"])
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code in (0, 1, 2), r.exit_code
    assert "Traceback" not in r.stderr
    if r.exit_code != 0:
        assert len(r.stderr.strip().splitlines()) >= 1


@settings(max_examples=40, deadline=None)
@given(argv=st.lists(st.one_of(st.sampled_from(
    ["bank", "sim", "market", "bench", "balance", "history", "--limit", "--period", "--db",
     "sqlite://", "-o", "json", "--seed", "--cores", "inf", "-1", "1e999", "[/]", "--", "--help"]),
    st.text(max_size=6)), max_size=6))  # fmt: skip
def test_fuzz_any_arguments_never_traceback(argv: list[str]) -> None:
    r = runner.invoke(app, argv)
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, repr(r.exception))
    assert r.exit_code in (0, 1, 2), (argv, r.exit_code, r.stderr)


def test_a_trace_without_jobs_is_refused_by_the_commands(tmp_path: Path) -> None:
    f = tmp_path / "header-only.swf"
    f.write_text("; MaxProcs: 4\n")
    code, _, err = run("sim", "run", "--trace", str(f), "--scheduler", "fcfs",
                       "--out", str(tmp_path / "o"))
    one_line_error(code, err)
    assert "no job records" in err and not (tmp_path / "o").exists()


def test_a_local_file_never_silently_overrides_a_trace_of_merkat_traces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from merkat.workload.traces import TraceNotFound, find_trace

    theirs = tmp_path / "traces"
    theirs.mkdir()
    line = b"1 0 0 10 1 -1 -1 1 20 -1 1 1 1 1 1 -1 -1 -1\n"
    (theirs / "t.swf").write_bytes(line)
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    monkeypatch.setenv("MERKAT_TRACES", str(theirs))
    assert find_trace("t.swf") == theirs / "t.swf"  # only there
    (here / "t.swf").write_bytes(line * 2)
    with pytest.raises(TraceNotFound, match=r"ambiguous: \./t\.swf and .*t\.swf"):
        find_trace("t.swf")
    assert find_trace("./t.swf") == Path("./t.swf")  # explicit: the file here
    code, _, err = run("sim", "run", "--trace", "t.swf", "--scheduler", "fcfs",
                       "--out", str(tmp_path / "o"))
    one_line_error(code, err)
    assert "ambiguous" in err


def test_force_replaces_only_a_previous_runs_results(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """--force replaces a folder of results, never a folder of other files (they would be
    deleted with it), nor the current folder (or one holding it)."""
    mine = tmp_path / "thesis"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    for cmd in (("sim", "run", "--trace", TRACE, "--scheduler", "easy", "--jobs", "10"),
                ("sim", "experiment", "themis-fig5", "--jobs", "10", "--factors", "1")):
        code, out, err = run(*cmd, "--out", str(mine), "--force")
        one_line_error(code, err)
        assert "no previous run's results" in err and out == ""
        assert [p.name for p in mine.iterdir()] == ["thesis.tex"]
    monkeypatch.chdir(mine)
    for where in ("", ".", ".."):
        code, _, err = run("sim", "run", "--trace", TRACE, "--scheduler", "easy", "--jobs", "10",
                           "--out", where, "--force")
        one_line_error(code, err)
        assert "current folder" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis"]  # no temporary left
    assert [p.name for p in mine.iterdir()] == ["thesis.tex"]


@pytest.mark.parametrize("flags", [("--workers", "100000"), ("--seeds", "100000000"),
                                   ("--seeds", "0"), ("--period", "0.001")])
def test_experiment_flags_that_would_fork_or_run_forever(tmp_path: Path,
                                                         flags: tuple[str, ...]) -> None:
    code, out, err = run("sim", "experiment", "themis-fig5", "--jobs", "10", "--factors", "1",
                         "--out", str(tmp_path / "o"), *flags)
    one_line_error(code, err)
    assert flags[0] in err and out == "" and not (tmp_path / "o").exists()


def _row(k: int) -> dict[str, int]:
    return {"k": k}


def test_an_experiment_pool_has_no_more_processes_than_runs(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    from concurrent.futures import ProcessPoolExecutor

    from merkat.experiments import registry

    sizes: list[int | None] = []

    def pool(max_workers: int | None = None, **kw: object) -> ProcessPoolExecutor:
        sizes.append(max_workers)
        return ProcessPoolExecutor(max_workers=max_workers, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(registry, "ProcessPoolExecutor", pool)
    assert registry._execute_all(_row, [0, 1], 1024, None, None) == [{"k": 0}, {"k": 1}]
    assert sizes == [2]


def test_skip_past_the_end_of_the_trace_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "t.swf"
    f.write_text("; MaxProcs: 4\n" + "1 0 0 10 1 -1 -1 1 20 -1 1 1 1 1 1 -1 -1 -1\n" * 3)
    code, out, err = run("sim", "run", "--trace", str(f), "--scheduler", "fcfs", "--skip", "3",
                         "--out", str(tmp_path / "o"))
    one_line_error(code, err)  # was a run of 0 jobs, exit 0
    assert "--skip 3" in err and "3 job records" in err and out == ""
    assert not (tmp_path / "o").exists()
    code, _, err = run("sim", "run", "--trace", str(f), "--scheduler", "fcfs", "--skip", "2",
                       "--out", str(tmp_path / "o"), "-o", "json")
    assert code == 0, err


def test_plot_out_that_is_a_file(tmp_path: Path) -> None:
    code, _, err = run("sim", "run", "--trace", TRACE, "--scheduler", "fcfs", "--jobs", "20",
                       "--out", str(tmp_path / "r"))
    assert code == 0, err
    f = tmp_path / "f.txt"
    f.write_text("x")
    code, out, err = run("sim", "plot", str(tmp_path / "r"), "--out", str(f))
    one_line_error(code, err)  # was "error: ...f.txt: File exists", exit 1
    assert "--out" in err and out == "" and f.read_text() == "x"


def test_an_empty_trace_name(tmp_path: Path) -> None:
    for cmd in (("sim", "run", "--scheduler", "fcfs", "--out", str(tmp_path / "o")),
                ("bench", "sim")):
        code, _, err = run(*cmd, "--trace", "")
        one_line_error(code, err)  # was "error: --trace: no such file:"
        assert "--trace: empty: give a trace name" in err


@pytest.mark.parametrize("name", ["gridcloud-strategies", "themis-fig6", "merkat-satisfaction"])
def test_factors_of_an_experiment_that_does_not_sweep_the_load(tmp_path: Path, name: str) -> None:
    code, out, err = run("sim", "experiment", name, "--factors", "0.5",
                         "--out", str(tmp_path / "o"))
    one_line_error(code, err)  # was ignored: the run went on at the paper's loads
    assert "--factors" in err and "does not sweep the load" in err and out == ""


def test_lublin_out_names_the_flag(tmp_path: Path) -> None:
    for out, message in ((tmp_path, "is a folder"), (tmp_path / "no" / "x.swf", "cannot write")):
        code, stdout, err = run("sim", "lublin", "--jobs", "10", "--out", str(out))
        one_line_error(code, err)  # was "error: /tmp/...: Is a directory"
        assert err.startswith("error: --out: ") and message in err and stdout == ""


@pytest.mark.parametrize("name", ["themis-fig6", "merkat-fig6", "merkat-fig7", "tycoon-ar6",
                                  "tycoon-window", "merkat-satisfaction"])
def test_jobs_of_an_experiment_that_does_not_read_it(tmp_path: Path, name: str) -> None:
    code, out, err = run("sim", "experiment", name, "--jobs", "5", "--out", str(tmp_path / "o"))
    one_line_error(code, err)  # was ignored: the whole experiment ran at its own size
    assert err.strip() == (f"error: --jobs: experiment {name!r} does not take a number of jobs "
                           "(its workload is part of the setup)") and out == ""


def test_each_experiments_jobs_marker_is_what_its_runs_read() -> None:
    """``takes_jobs`` is true exactly where ``--jobs`` changes the runs (gridcloud-*: tasks
    per user; the trace sweeps: the window), so a flag that changes nothing is refused."""
    from merkat.experiments import EXPERIMENTS

    for name in EXPERIMENTS:
        exp = EXPERIMENTS[name]
        factors = exp.default_factors or (0.5,)
        changed = list(exp.runs(1, 7, factors)) != list(exp.runs(1, None, factors))
        assert exp.takes_jobs is changed, name
    assert EXPERIMENTS["gridcloud-priority"].takes_jobs


@pytest.mark.parametrize(("name", "why"), [
    ("../../etc/passwd", "is a path"), ("a/b/mytrace", "is a path"), ("..", "is a path"),
    ("", "is empty"), ("bad\x01name", "is not a trace name"), (".hidden", "is not a trace name"),
])
def test_fetch_refuses_a_name_that_is_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             name: str, why: str) -> None:
    """``merkat traces fetch ../../etc/passwd --url ... --sha256 ...`` fetched the file into
    the cache as ``passwd`` (``a/b/mytrace`` as ``mytrace``, a control character kept in the
    file name). Exit 2, one line listing the valid names; nothing downloaded."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    src = tmp_path / "t.swf"
    src.write_text("; a trace\n1 0 0 10 1 -1 -1 1 100 -1 1 1 1 1 1 -1 -1 -1\n")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    for extra in ([], ["--url", src.as_uri(), "--sha256", sha]):
        code, out, err = run("traces", "fetch", name, *extra)
        one_line_error(code, err)
        assert err.startswith(f"error: NAME: {name!r} {why}: a trace's name is letters") and \
            "HPC2N-2002-2.2-cln" in err and "merkat traces list" in err and out == ""
    assert not (tmp_path / "cache").exists()
