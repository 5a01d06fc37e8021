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


@pytest.mark.parametrize("args, said", [
    (["--nodes", "10000000", "--pods-per-node", "1"],  # was 'error: out of memory' after 30 s
     "--nodes must be between 1 and 10000, got 10000000"),
    (["--pods-per-node", "1000000"], "--pods-per-node must be between 1 and 1000, got 1000000"),
    (["--nodes", "10000", "--pods-per-node", "1000"],
     "--nodes x --pods-per-node must be at most 100,000 pods, got 10,000,000"),
    (["--grow", "100000000"], "--grow: node counts must be between 1 and 10000"),
    (["--grow", ",".join(["1"] * 11)], "--grow: at most 10 node counts, got 11"),
    (["--grow", "10000", "--pods-per-node", "100"],
     "--grow x --pods-per-node must be at most 100,000 pods, got 1,000,000"),
])
def test_bench_kubernetes_sizes_are_bounded(args: list[str], said: str) -> None:
    r = CliRunner().invoke(app, ["bench", "kubernetes", *args])
    assert r.exit_code == 2 and said in r.output, r.output
