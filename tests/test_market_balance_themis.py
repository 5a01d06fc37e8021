"""Themis Fig. 2's load balancer (``BalanceParams.rule == "themis"``, ``--balancer themis``),
on hand-made examples whose moves follow from the paper's rule (Themis §III-B): the least
valuable VM of the most overloaded host moves to the least loaded (worst-fit) host; stop after
10 non-improving iterations."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market import BalanceParams, Hosts, VMs, clear
from merkat.market.types import MarketError, balancer_params

INF = math.inf


def _example(min_mem_a: float = 0.0, mem_h2: float = 1000.0) -> tuple[Hosts, VMs]:
    """3 hosts of 100 cores; A, B, C (bids 1, 2, 3) on h0, D (bid 3) on h1, h2 empty; each VM
    capped at 100 cores. Ideal shares (9 credits for 300 cores): 33.3, 66.7, 100, 100."""
    hosts = Hosts(("h0", "h1", "h2"), np.array([[100.0, 1000.0], [100.0, 1000.0],
                                                [100.0, mem_h2]]))
    vms = VMs(("A", "B", "C", "D"), bid=np.array([[1.0, 0], [2.0, 0], [3.0, 0], [3.0, 0]]),
              cap=np.array([[100.0, INF]] * 4), host=np.array([0, 0, 0, 1]),
              minimum=np.array([[0.0, min_mem_a], [0, 0], [0, 0], [0, 0]]))
    return hosts, vms


def test_themis_moves_the_least_valuable_vm_of_the_most_overloaded_host() -> None:
    hosts, vms = _example()
    c = clear(hosts, vms, params=balancer_params("themis"))
    np.testing.assert_allclose(c.ideal[:, 0], [100 / 3, 200 / 3, 100, 100])
    # Start: h0 shares 100 cores among A, B, C (16.7, 33.3, 50): errors -1, -1, -1; D 0.
    assert c.balance.rms_before == pytest.approx(math.sqrt(3 / 4))
    # 1: loads h0 2.0, h1 1.0, h2 0 -> A (bid 1) to h2: A 100 (+0.667), B 40 and C 60 (-0.667)
    # 2: loads h0 1.667, h1 1.0, h2 0.333 -> B (bid 2, (A, h0) is tabu) to h2: every error 0.
    # (The search keeps the sum of squared errors by updates, so what is left of it is the
    # rounding of BLAS's dot, which differs between CPUs: 0.0 with AVX-512 kernels, 7.5e-9
    # on an AVX2 EPYC. Zero to within 1e-6 is the paper's "every error 0".)
    assert c.balance.iterations == 2
    assert c.balance.rms_after == pytest.approx(0.0, abs=1e-6)
    assert c.host.tolist() == [2, 2, 0, 1]
    assert [(m.vm, m.src, m.dst) for m in c.migrations] == [(0, 0, 2), (1, 0, 2)]
    np.testing.assert_allclose(c.allocation[:, 0], c.ideal[:, 0])
    one = clear(hosts, vms, params=dataclasses.replace(balancer_params("themis"),
                                                       max_iterations=1))
    assert one.host.tolist() == [2, 0, 0, 1]
    assert one.balance.rms_after == pytest.approx(math.sqrt(1 / 3))
    # Merkat's rule (the default) moves the largest error to its best node: another mapping.
    assert BalanceParams().rule == "merkat"
    assert clear(hosts, vms).host.tolist() != [2, 2, 0, 1]


def test_themis_destination_is_the_least_loaded_host_where_the_vm_fits() -> None:
    # A needs 100 MiB that h2 (10 MiB) cannot hold: worst fit among the others is h1.
    # 1: A to h1: A 25, D 75 (-0.333 each), B 40, C 60 (-0.667 each): rms sqrt(5/18).
    # 2: loads h0 1.667, h1 1.333, h2 0 -> B to h2: B 100 (+0.333), C 100 (0): rms sqrt(1/12).
    hosts, vms = _example(min_mem_a=100.0, mem_h2=10.0)
    params = dataclasses.replace(balancer_params("themis"), max_iterations=1)
    assert clear(hosts, vms, params=params).balance.rms_after == pytest.approx(
        math.sqrt(5 / 18))
    c = clear(hosts, vms, params=dataclasses.replace(params, max_iterations=2))
    assert c.host.tolist() == [1, 2, 0, 1]
    assert c.balance.rms_after == pytest.approx(math.sqrt(1 / 12))


def test_themis_stops_after_ten_iterations_without_improvement() -> None:
    # 6 equal VMs (ideal 66.7 cores each) on 4 hosts: two on h0, two on h1 (50 each: -1/3),
    # one on h2 and one on h3 (100: +1/3). That spread is the best there is, so no move
    # improves it: the search stops after 10 non-improving iterations, the mapping unchanged.
    hosts = Hosts(("h0", "h1", "h2", "h3"), np.array([[100.0, 1000.0]] * 4))
    start = [0, 0, 1, 1, 2, 3]
    vms = VMs(tuple("ABCDEF"), bid=np.array([[1.0, 0]] * 6),
              cap=np.array([[100.0, INF]] * 6), host=np.array(start))
    c = clear(hosts, vms, params=balancer_params("themis"))
    assert c.balance.ran and c.balance.iterations == 10
    assert c.host.tolist() == start and c.migrations == ()
    assert c.balance.rms_after == c.balance.rms_before == pytest.approx(1 / 3)
    merkat = clear(hosts, vms, params=dataclasses.replace(balancer_params("themis"),
                                                          max_no_improve=15))
    assert merkat.balance.iterations > 10  # the bound is what stopped it
    # With 3 VMs on 2 hosts the 6 (VM, host) pairs are all tabu after 6 moves: it stops there.
    small = VMs(("A", "B", "C"), bid=np.array([[1.0, 0]] * 3),
                cap=np.array([[100.0, INF]] * 3), host=np.array([0, 1, 1]))
    two = Hosts(("h0", "h1"), np.array([[100.0, 1000.0]] * 2))
    assert clear(two, small, params=balancer_params("themis")).balance.iterations == 6
    # the migration budget bounds the search too: no move may exceed it
    c0 = clear(hosts, vms, params=dataclasses.replace(balancer_params("themis"),
                                                      max_migrations=0))
    assert c0.balance.iterations == 0 and c0.host.tolist() == start


def test_balancer_names() -> None:
    assert balancer_params("merkat") == BalanceParams()
    assert balancer_params("themis").max_no_improve == 10
    assert balancer_params("themis").tabu_size == 20
    with pytest.raises(MarketError, match="balancer"):
        balancer_params("random")
    with pytest.raises(MarketError, match=r"balance\.rule"):
        BalanceParams(rule="worst")


def _doc(rule: str) -> dict[str, object]:
    vm = [("A", 1, "h0"), ("B", 2, "h0"), ("C", 3, "h0"), ("D", 3, "h1")]
    return {"hosts": [{"id": f"h{k}", "cpu": 100, "memory": 1000} for k in range(3)],
            "vms": [{"id": i, "bid": {"cpu": b, "memory": 0},
                     "max": {"cpu": 100, "memory": None}, "host": h} for i, b, h in vm],
            "balance": {"rule": rule}}


def test_cli_market_clear_with_the_themis_rule(tmp_path: Path) -> None:
    f = tmp_path / "m.json"
    f.write_text(json.dumps(_doc("themis")))
    r = CliRunner().invoke(app, ["market", "clear", str(f), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert [v["host"] for v in out["vms"]] == ["h2", "h2", "h0", "h1"]
    assert out["migrations"] == [{"vm": "A", "from": "h0", "to": "h2"},
                                 {"vm": "B", "from": "h0", "to": "h2"}]
    f.write_text(json.dumps(_doc("tabu")))
    bad = CliRunner().invoke(app, ["market", "clear", str(f)])
    assert bad.exit_code == 2 and "balance.rule" in bad.stderr


def test_cli_sim_run_market_with_the_themis_balancer(tmp_path: Path) -> None:
    runner = CliRunner()
    base = ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "40", "--interarrival-factor", "0.05", "--hosts", "120",
            "--cores-per-host", "2", "--scheduler", "market", "-o", "json"]
    r = runner.invoke(app, [*base, "--balancer", "themis", "--out", str(tmp_path / "t")])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["balancer"] == "themis" and doc["ledger_audit_ok"] and doc["jobs"] == 40
    assert doc["migrations"] > 0  # the balancer ran and moved VMs
    m = runner.invoke(app, [*base, "--out", str(tmp_path / "m")])
    assert json.loads(m.stdout)["balancer"] == "merkat"
    for extra, flag in ((["--balancer", "tabu"], "--balancer"),):
        bad = runner.invoke(app, [*base, *extra, "--out", str(tmp_path / "x")])
        assert bad.exit_code == 2 and flag in bad.stderr
    batch = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--scheduler",
                                "easy", "--balancer", "themis", "--out", str(tmp_path / "e")])
    assert batch.exit_code == 2 and "--balancer: only with --scheduler market" in batch.stderr


@pytest.mark.slow
def test_experiment_themis_fig5_takes_the_balancer(tmp_path: Path) -> None:
    from merkat.experiments import run_experiment

    doc = run_experiment("themis-fig5", tmp_path / "t", jobs=20, factors=(0.5,),
                         balancer="themis")
    assert doc["parameters"]["balancer"] == "themis"
    market = [r for r in doc["runs"] if r["scheduler"] == "market"]
    assert market and all(r["ledger_audit_ok"] for r in market)
    default = run_experiment("themis-fig5", tmp_path / "m", jobs=20, factors=(0.5,))
    assert "balancer" not in default["parameters"]  # the default's results.json is unchanged
    with pytest.raises(ValueError, match="does not take --balancer"):
        run_experiment("merkat-fig6", tmp_path / "x", balancer="themis")
    r = CliRunner().invoke(app, ["sim", "experiment", "themis-fig5", "--out",
                                 str(tmp_path / "y"), "--balancer", "tabu"])
    assert r.exit_code == 2 and "--balancer" in r.stderr
