"""Market mechanisms by name (``merkat.market.mechanisms``): proportional share, Tycoon's
per-host auctions and the grid-cloud posted prices, behind one interface the platform and
``merkat sim run --market`` use."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market import NO_HOST, BalanceParams, Hosts, VMs, clear
from merkat.market.mechanisms import MECHANISMS, MechanismError, make_mechanism
from merkat.market.posted import adapt

runner = CliRunner()
INF = np.inf
RESERVE = np.array([0.001, 0.0])


def vms(bids: list[float], hosts: list[int], cap: float = INF) -> VMs:
    n = len(bids)
    return VMs(tuple(f"v{i}" for i in range(n)), np.array([[b, 0.0] for b in bids]),
               np.array([[cap, INF]] * n), np.array(hosts))


def test_the_registry_names_every_mechanism_and_refuses_others() -> None:
    assert sorted(MECHANISMS) == ["drf", "posted", "proportional-share", "tycoon"]
    with pytest.raises(MechanismError, match="known: drf, posted, proportional-share, tycoon"):
        make_mechanism("vickrey")


def test_proportional_share_is_the_markets_clear() -> None:
    hosts = Hosts(("a", "b"), np.array([[4.0, 1e9], [4.0, 1e9]]))
    v = vms([3.0, 1.0, 2.0], [NO_HOST, NO_HOST, NO_HOST], cap=2.0)
    got = make_mechanism("proportional-share").clear(hosts, v, reserve_price=RESERVE,
                                                     params=BalanceParams())
    want = clear(hosts, v, reserve_price=RESERVE, params=BalanceParams())
    assert np.array_equal(got.allocation, want.allocation)
    assert np.array_equal(got.host, want.host) and np.array_equal(got.price, want.price)


def test_tycoon_clears_each_host_alone_and_never_migrates() -> None:
    hosts = Hosts(("a", "b"), np.array([[4.0, 1e9], [4.0, 1e9]]))
    # all three already on host a: proportional share rebalances, Tycoon keeps them there
    v = vms([3.0, 1.0, 4.0], [0, 0, 0])
    t = make_mechanism("tycoon").clear(hosts, v, reserve_price=RESERVE,
                                       params=BalanceParams())
    assert t.host.tolist() == [0, 0, 0] and t.migrations == ()
    assert t.allocation[:, 0].tolist() == pytest.approx([1.5, 0.5, 2.0])  # 4 · b / Σb
    assert t.node_price[:, 0].tolist() == pytest.approx([2.0, 0.0])  # Σb / capacity
    assert t.price[0] == pytest.approx(1.0)  # the capacity-weighted mean of the hosts' prices
    ps = clear(hosts, v, reserve_price=RESERVE, params=BalanceParams())
    assert ps.migrations  # the cluster-wide market moves some away


def test_posted_prices_sell_at_the_posted_price_and_adapt_by_eq5() -> None:
    hosts = Hosts(("a",), np.array([[4.0, 1e9]]))
    m = make_mechanism("posted")
    assert not m.stateless
    # period 1: price = the reserve 0.001; bids buy bid/price, capped at 2 cores each
    c1 = m.clear(hosts, vms([0.001, 0.0015, 0.01], [NO_HOST] * 3, cap=2.0),
                 reserve_price=RESERVE, params=BalanceParams())
    assert c1.price[0] == pytest.approx(0.001)
    asked = [1.0, 1.5, 2.0]  # 4.5 cores asked on a 4-core host: rationed to 4
    assert c1.allocation[:, 0].tolist() == pytest.approx([a * 4 / 4.5 for a in asked])
    # the price of period 2 follows eq. 5 (no demand before: P·(1 + (4.5 - 4)/4))
    p2 = adapt(0.001, 0.0, 4.5, 4.0)
    assert p2 == pytest.approx(0.001 * 1.125)
    c2 = m.clear(hosts, vms([0.001, 0.0015, 0.01], [0, 0, 0], cap=2.0),
                 reserve_price=RESERVE, params=BalanceParams())
    assert c2.price[0] == pytest.approx(p2)
    # the price of period 3 follows eq. 5 on period 2's demand; then no demand: it halves,
    # but never under the reserve
    d2 = sum(min(2.0, b / p2) for b in (0.001, 0.0015, 0.01))
    p3 = adapt(p2, 4.5, d2, 4.0)
    c3 = m.clear(hosts, vms([], []), reserve_price=RESERVE, params=BalanceParams())
    assert c3.price[0] == pytest.approx(p3)
    c4 = m.clear(hosts, vms([], []), reserve_price=RESERVE, params=BalanceParams())
    assert c4.price[0] == pytest.approx(max(p3 / 2, 0.001))
    c5 = m.clear(hosts, vms([], []), reserve_price=RESERVE, params=BalanceParams())
    assert c5.price[0] == pytest.approx(max(p3 / 4, 0.001)) == pytest.approx(0.001)


@pytest.mark.parametrize("market", ["tycoon", "posted"])
def test_sim_run_takes_the_market_by_name(market: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "80",
                            "--scheduler", "market", "--market", market, "--charging", "use",
                            "--hosts", "240", "--cores-per-host", "1",
                            "--out", str(tmp_path / "o"), "-o", "json"])
    assert r.exit_code == 0, r.stderr
    s = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert s["market"] == market and s["jobs"] == 80 and s["ledger_audit_ok"]
    assert s["bank"]["audit_ok"] and s["finished"] > 0
    if market == "tycoon":
        assert s["migrations"] == 0


def test_sim_run_refuses_an_unknown_market_in_one_line(tmp_path: Path) -> None:
    base = ["sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "10",
            "--out", str(tmp_path / "o")]
    r = runner.invoke(app, [*base, "--scheduler", "market", "--market", "vickrey"])
    assert r.exit_code == 2 and "--market must be one of drf, posted, proportional-share, tycoon" \
        in r.stderr
    r = runner.invoke(app, [*base, "--scheduler", "edf", "--market", "tycoon"])
    assert r.exit_code == 2 and "only with --scheduler market" in r.stderr
