"""Tycoon's Service Location Service (§2.2): registration, refresh, expiry, the query's order
(Best Response's w/y) and its use by the Tycoon simulator's agents."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market.best_response import solve
from merkat.market.sls import ServiceLocationService, SLSError
from merkat.worlds.tycoon.simulator import TycoonConfig, TycoonJob, simulate

runner = CliRunner()


def test_register_refresh_keeps_the_first_registration_and_moves_the_expiry() -> None:
    sls = ServiceLocationService(ttl_s=30)
    first = sls.register("h1", 2, 0.5, now=100)
    assert (first.registered_at, first.refreshed_at, first.expires_at) == (100, 100, 130)
    assert first.price == 0.25  # bids / capacity
    again = sls.register("h1", 2, 0.8, now=120)
    assert (again.registered_at, again.refreshed_at, again.expires_at) == (100, 120, 150)
    assert len(sls) == 1 and sls.query(125)[0].bids == 0.8
    with pytest.raises(SLSError, match=r"^now: host 'h1' refreshed at 120") as exc:
        sls.register("h1", 2, 0.8, now=110)
    assert exc.value.field == "now"


def test_a_record_not_refreshed_within_its_ttl_expires() -> None:
    sls = ServiceLocationService(ttl_s=30)
    sls.register("old", 2, 0.1, now=0)
    sls.register("fresh", 2, 0.1, now=0)
    sls.register("fresh", 2, 0.1, now=25)
    assert [r.host for r in sls.query(29.9)] == ["old", "fresh"]
    assert [r.host for r in sls.query(30)] == ["fresh"]  # expired at 0 + 30, not yet dropped
    assert len(sls) == 2
    assert sls.expire(30) == ["old"] and len(sls) == 1
    assert sls.expire(54) == [] and sls.expire(55) == ["fresh"]
    assert sls.query(55) == []
    sls.register("old", 2, 0.1, now=60)  # back: a new registration
    assert sls.query(60)[0].registered_at == 60
    assert sls.deregister("old") and not sls.deregister("old")


def test_query_ranks_by_capacity_over_bids_with_the_reserve_and_limits() -> None:
    sls = ServiceLocationService(ttl_s=10)
    for host, cap, bids in (("a", 2, 1.0), ("b", 4, 1.0), ("c", 2, 0.0), ("d", 1, 0.25),
                            ("e", 2, 0.5)):
        sls.register(host, cap, bids, now=0)
    # w/y with y = max(bids, 0.1): a 2, b 4, c 20 (empty: the reserve), d 4, e 4
    assert [r.host for r in sls.query(0, reserve=0.1)] == ["c", "b", "d", "e", "a"]
    assert [r.host for r in sls.query(0, 2, reserve=0.1)] == ["c", "b"]
    # ties (b, d, e) by the tiebreak's ranks, lowest first
    ranks = {"b": 3, "d": 1, "e": 2, "a": 0, "c": 0}
    assert [r.host for r in sls.query(0, reserve=0.1, tiebreak=ranks)] == ["c", "d", "e", "b", "a"]
    assert sls.query(0)[0].host == "c"  # no reserve: a free host ranks first
    for bad, field in (({"limit": 0}, "limit"), ({"limit": 1.5}, "limit"),
                       ({"reserve": -1.0}, "reserve")):
        with pytest.raises(SLSError, match=f"^{field}: ") as exc:
            sls.query(0, **bad)  # type: ignore[arg-type]
        assert exc.value.field == field
    for args, field in ((("x", 0, 1.0, 0), "capacity"), (("x", 1, -1.0, 0), "bids"),
                        (("x", 1, float("nan"), 0), "bids")):
        with pytest.raises(SLSError, match=f"^{field}: "):
            sls.register(*args)
    with pytest.raises(SLSError, match=r"^ttl_s: "):
        ServiceLocationService(0)


def test_the_hosts_best_response_funds_are_a_prefix_of_the_sls_ranking() -> None:
    """The paper's criterion: Best Response funds hosts in decreasing w/y, so a small budget
    funds the first hosts the SLS returns, whatever the budget."""
    rng = np.random.default_rng(3)
    for _ in range(50):
        n = int(rng.integers(2, 20))
        cap, bids = rng.uniform(1, 4, n), rng.uniform(0, 2, n)
        sls = ServiceLocationService(ttl_s=10)
        sls.register_many(list(range(n)), cap, bids, now=0)
        ranked = [int(r.host) for r in sls.query(0, reserve=0.05)]
        x = solve(float(rng.uniform(0.01, 5)), cap, np.maximum(bids, 0.05))
        funded = int((x > 0).sum())
        assert funded >= 1 and set(np.flatnonzero(x > 0)) == set(ranked[:funded])


JOBS = [TycoonJob("a", 10, 7200, subjobs=3, work_s=1800),
        TycoonJob("b", 10, 7200, launch_s=60, subjobs=3, work_s=1800)]


def test_the_simulator_with_every_host_offered_is_unchanged_and_a_limit_bounds_the_nodes() -> None:
    cfg = TycoonConfig(hosts=6, reserve=1e-4, seed=1)
    every = simulate(cfg, JOBS)
    limited_to_all = simulate(TycoonConfig(hosts=6, reserve=1e-4, seed=1, sls_limit=6), JOBS)
    assert every.jobs == limited_to_all.jobs
    assert np.array_equal(every.prices, limited_to_all.prices)
    assert [j["nodes"] for j in every.jobs] == [3, 3]
    two = simulate(TycoonConfig(hosts=6, reserve=1e-4, seed=1, sls_limit=2), JOBS)
    assert [j["nodes"] for j in two.jobs] == [2, 2] and two.audit_ok


def test_a_stale_sls_sends_a_later_job_onto_busy_hosts() -> None:
    """Live records: b (launched 60 s after a) takes the 3 hosts a left empty, every host then
    carries one bid. Records refreshed once an hour: at 60 s b still sees every host empty
    (a's bids are not in the SLS yet) and, on some seeds, picks one of a's hosts."""
    def empty_hosts(refresh: float, seed: int) -> int:
        cfg = TycoonConfig(hosts=6, reserve=1e-4, seed=seed, sls_refresh_s=refresh)
        res = simulate(cfg, JOBS)
        return int((res.prices[7] == 0).sum())  # the interval after b's launch

    assert all(empty_hosts(0, s) == 0 for s in range(4))
    assert any(empty_hosts(3600, s) > 0 for s in range(4))
    with pytest.raises(ValueError, match=r"^sls_ttl_s: must be > sls_refresh_s"):
        TycoonConfig(sls_refresh_s=60, sls_ttl_s=30)


def test_tycoon_run_sls_limit_end_to_end(tmp_path: Path) -> None:
    scenario = tmp_path / "s.json"
    scenario.write_text(json.dumps({
        "config": {"hosts": 6, "reserve": 0.0001, "seed": 1},
        "jobs": [{"user": j.user, "budget": j.budget, "deadline_h": 2, "subjobs": 3,
                  "work_min": 30, "launch_s": j.launch_s} for j in JOBS]}))
    r = runner.invoke(app, ["tycoon", "run", str(scenario), "--sls-limit", "2", "-o", "json"])
    assert r.exit_code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [j["nodes"] for j in doc["items"]] == [2, 2]
    assert doc["sls"] == {"limit": 2, "refresh_s": 0.0, "ttl_s": 30.0} and doc["audit_ok"]
    r = runner.invoke(app, ["tycoon", "run", str(scenario), "--sls-refresh", "60", "-o", "json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["sls"]["ttl_s"] == 180.0
    bad = json.loads(scenario.read_text())
    bad["config"] |= {"sls_refresh_s": 60, "sls_ttl_s": 30}
    scenario.write_text(json.dumps(bad))
    r = runner.invoke(app, ["tycoon", "run", str(scenario)])
    assert r.exit_code == 2
    assert "config: sls_ttl_s: must be > sls_refresh_s" in r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1
