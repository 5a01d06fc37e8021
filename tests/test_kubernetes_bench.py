"""``merkat bench kubernetes``: API calls per period grow with the changes, not the cluster."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from merkat.cli import app

pytestmark = pytest.mark.kubernetes


def test_bench_kubernetes_prints_calls_per_period_as_the_cluster_grows() -> None:
    r = CliRunner().invoke(app, ["bench", "kubernetes", "--nodes", "4", "--pods-per-node", "3",
                                 "--grow", "1,4,8"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    period = out["period"]
    assert (period["nodes"], period["pods"]) == (4, 12)
    assert period["first"]["api_calls"] == 2 + 2 * 12
    assert period["first"]["calls"] == {"GET nodes": 1, "GET pods": 1, "POST binding": 12,
                                        "POST pods": 12}
    assert period["steady"]["calls"] == {"GET nodes": 1, "GET pods": 1}
    # One arrival on a node of 3 (16 cores, 2 wanted each: 8 fit, so nobody shrinks).
    assert period["arrival"]["ops"] == {"create": 1}
    growth = out["growth"]
    assert [g["nodes"] for g in growth] == [1, 4, 8]
    assert [g["steady_calls"] for g in growth] == [2, 2, 2]
    assert [g["arrival_calls"] for g in growth] == [4, 4, 4]
    assert period["running_pods"] == 13


def test_bench_kubernetes_rejects_bad_flags_in_one_line() -> None:
    r = CliRunner().invoke(app, ["bench", "kubernetes", "--grow", "10,,-1"])
    assert r.exit_code == 2 and "--grow" in r.output and "Traceback" not in r.output
