"""scripts/trace_window.py: a window of a trace's jobs (docs/benchmarks.md, issue 28), and its
bad input (one line, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "trace_window.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, str(SCRIPT), *args], env=env, text=True,
                          capture_output=True, timeout=60)


def test_a_window_keeps_the_header_and_the_jobs_asked_for(tmp_path: Path) -> None:
    swf = tmp_path / "t.swf"
    swf.write_text("; MaxProcs: 4\n1 0 0 10 1\n2 5 0 10 1\n3 9 0 10 2\n4 12 0 10 1\n")
    out = _run(str(swf), "1", "2")
    assert out.returncode == 0
    assert out.stdout == "; MaxProcs: 4\n2 5 0 10 1\n3 9 0 10 2\n"


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    missing = _run(str(tmp_path / "nosuch.swf"), "0", "3")
    assert missing.returncode == 2
    assert "error:" in missing.stderr and "nosuch.swf" in missing.stderr
    assert "Traceback" not in missing.stderr
    named = _run("no-such-trace-name", "0", "3")
    assert named.returncode == 2 and "'no-such-trace-name' not found" in named.stderr
    negative = _run(str(tmp_path / "nosuch.swf"), "-1", "3")
    assert negative.returncode == 2 and "first must be >= 0" in negative.stderr


def test_sim_replay_refuses_an_inter_arrival_factor_out_of_range(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "sim_replay.py"), "record",
                          str(tmp_path / "r.pkl"), "--fig5", "-3"], env=env, text=True,
                         capture_output=True, timeout=60)
    assert out.returncode == 2 and "--fig5 must be in (0, 10], got -3.0" in out.stderr
    assert "Traceback" not in out.stderr and not (tmp_path / "r.pkl").exists()


def test_the_fig5_scripts_refuse_a_factor_or_job_count_out_of_range() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

    def run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, str(ROOT / "scripts" / script), *args], env=env,
                              text=True, capture_output=True, timeout=60)

    for out, said in ((run("period_split.py", "--fig5", "-1"), "factor must be in (0, 10], got -1.0"),
                      (run("profile_fig5_run.py", "0"), "factor must be in (0, 10], got 0.0"),
                      (run("profile_fig5_run.py", "0.3", "--jobs", "0"), "--jobs must be >= 1, got 0")):
        assert out.returncode == 2, out.stderr
        assert said in out.stderr and "Traceback" not in out.stderr
        assert out.stdout == ""


def test_period_kinds_classes_every_period_and_refuses_bad_input() -> None:
    """scripts/period_kinds.py (docs/benchmarks.md, issue 28, twenty-third session): every
    period of the run is in one kind, the quiet ones clear nothing; bad input is one line."""
    import json

    kinds = ROOT / "scripts" / "period_kinds.py"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, str(kinds), "--jobs", "30"], env=env, text=True,
                         capture_output=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert sum(k["periods"] for k in got["kinds"]) == got["bench"]["periods"] > 0
    assert all(k["clearing_us"] == 0 for k in got["kinds"] if k["kind"] == "quiet")
    assert any(k["kind"].startswith("new clearing") for k in got["kinds"])
    for bad, says in ((["--jobs", "-1"], "must be >= 0"), (["--trace", "no-such"], "not found")):
        r = subprocess.run([sys.executable, str(kinds), *bad], env=env, text=True,
                           capture_output=True, timeout=60)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr
