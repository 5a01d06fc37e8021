"""``merkat sim experiment gridcloud-*``: end to end through the CLI, the interfaces of
``results.json`` other tools rely on, audited money, reproducibility."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, ["sim", "experiment", *args])
    return r.exit_code, r.stdout, r.stderr


def test_strategies_rows_and_reproducibility(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    code, out, err = run("gridcloud-strategies", "--out", str(a), "--jobs", "8")
    assert code == 0, err
    assert "no offer fits budget" in out
    doc = json.loads((a / "results.json").read_text())
    assert doc["bank"]["audit_ok"] is True
    assert [(r["retry"], r["alternatives"]) for r in doc["rows"]] == [
        (False, False), (False, True), (True, False), (True, True)]
    for r in doc["rows"]:
        assert {"retry", "alternatives", "succeeded", "failed_budget", "failed_deadline",
                "failed_offer"} <= r.keys()
        total = r["succeeded"] + r["failed_budget"] + r["failed_deadline"] + r["failed_offer"]
        assert total == pytest.approx(20 * 8)
    assert (a / "gridcloud-strategies.png").stat().st_size > 5_000
    code, _, err = run("gridcloud-strategies", "--out", str(b), "--jobs", "8", "--workers", "2")
    assert code == 0, err
    assert (a / "results.json").read_bytes() == (b / "results.json").read_bytes()


def test_priority_rows(tmp_path: Path) -> None:
    code, out, err = run("gridcloud-priority", "--out", str(tmp_path), "--jobs", "10")
    assert code == 0, err
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["bank"]["audit_ok"] is True
    assert [r["priority"] for r in doc["rows"]] == ["risk", "importance"]
    for r in doc["rows"]:
        assert {"priority", "success_pct", "value_succeeded", "value_failed"} <= r.keys()
        assert 0 <= r["success_pct"] <= 100
    assert "paper +11 %" in out


@pytest.mark.slow
def test_adaptability_and_fairness_run(tmp_path: Path) -> None:
    code, _out, err = run("gridcloud-adaptability", "--out", str(tmp_path / "a"), "--jobs", "40")
    assert code == 0, err
    doc = json.loads((tmp_path / "a" / "results.json").read_text())
    assert doc["bank"]["audit_ok"] is True and len(doc["rows"]) == 4
    s = doc["runs"][0]["series"]
    assert max(s["running_pes"]) <= max(s["allocated_pes"]) <= 10 * 12 * 3  # PEs of 6,000 MIPS
    code, _out, err = run("gridcloud-fairness", "--out", str(tmp_path / "f"), "--jobs", "8")
    assert code == 0, err
    doc = json.loads((tmp_path / "f" / "results.json").read_text())
    assert doc["bank"]["audit_ok"] is True
    assert {r["cluster"] for r in doc["rows"]} == {"small", "standard", "powerful"}
    assert (tmp_path / "f" / "gridcloud-fairness.png").exists()
