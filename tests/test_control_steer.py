"""``steer="share"`` (issue 26, point 3): a deadline controller bids for the share its work
left needs by the deadline, from the measured rate, in one step; the simulator's default
(``steer="scale"``) is unchanged (the golden digests in tests/test_runtime.py)."""

from __future__ import annotations

import pytest

from merkat.control.deadline import VerticalDeadline
from merkat.control.registry import PolicyError, make_policy
from merkat.control.steer import ShareSteer, live_params, share_bid
from merkat.control.types import Action, Budget, Metrics, Observation, VMState, VMView

M = {"cpu": 1.0}


def obs(rate: float | None, done: float, alloc: float = 0.25, bid: float = 0.001,
        time: float = 4.0, balance: float = 100.0, vms: bool = True) -> Observation:
    """One CPU, three other VMs bidding 0.001 each; a VM of one core; 80 units of work at 16
    units/s at full size; deadline at 15 s; 1 s periods."""
    vm = VMView("a/vm1", VMState.RUNNING, {"cpu": alloc}, {"cpu": bid})
    return Observation(time=time, period=1.0, prices={"cpu": 0.003 + bid},
                       capacity={"cpu": 1.0}, vm_size=M, budget=Budget(balance),
                       bid_min={"cpu": 0.001}, vms=(vm,) if vms else (),
                       metrics=Metrics(work_done=done, work_total=80.0, progress_rate=rate,
                                       ideal_rate=16.0),
                       deadline=15.0)


def test_the_bid_buys_the_share_against_the_others_bids() -> None:
    o = obs(None, 0.0)
    x = share_bid(o, 0.5, 1)["cpu"]
    assert x == pytest.approx(0.003)  # others 0.003: x / (x + 0.003) = 0.5 of one CPU
    assert x / (x + 0.003) == pytest.approx(0.5)
    assert share_bid(o, 0.01, 1)["cpu"] == 0.001  # never under the reserve
    assert share_bid(o, 1.0, 1)["cpu"] == pytest.approx(0.003 * 0.9 / 0.1)  # at most 90 %


def measured(s: ShareSteer, done: float, alloc: float = 0.25, rate: float = 3.2,
             bid: float = 0.001) -> None:
    """Feed ``s`` the period before (at 3 s) so that its speed is measured over it."""
    s.observe(obs(rate, done - rate * 1.0, alloc=alloc, bid=bid, time=3.0))


def test_the_share_follows_the_shortfall_in_one_step() -> None:
    s = ShareSteer(margin=0.25)
    assert s.need(obs(None, 40.0)) == pytest.approx(4.0 / 16.0)  # before a measurement: the
    # ideal rate. Then 0.25 core gave 3.2 units/s: a speed of 12.8 at the full VM (efficiency
    # 0.8); 40 units left in 11 s less one period: 4 units/s, 4 / 12.8 = 0.3125 of the VM
    measured(s, 40.0)
    d = s.reconfigure(obs(3.2, 40.0), cap=10.0)
    assert s.speed == pytest.approx(12.8) and s.efficiency == pytest.approx(0.8)
    assert s.needed == pytest.approx(0.3125)
    f = 0.3125 * 1.25
    assert d.bids["a/vm1"]["cpu"] == pytest.approx(0.003 * f / (1 - f))
    assert s.at_risk is None and d.action is Action.NONE
    # twice as far behind: twice the rate needed, a bid for twice the share (not a doubling
    # per period of the old bid)
    s3 = ShareSteer(margin=0.25)
    measured(s3, 40.0)
    s3.observe(obs(3.2, 40.0))
    assert s3.need(obs(3.2, 0.0, time=4.0)) == pytest.approx(2 * 0.3125)
    # ahead of schedule: a lower bid than it has
    s4 = ShareSteer(margin=0.25)
    measured(s4, 76.0, alloc=0.8, rate=12.0, bid=0.012)
    d4 = s4.reconfigure(obs(12.0, 76.0, alloc=0.8, bid=0.012), cap=10.0)
    assert d4.bids["a/vm1"]["cpu"] < 0.012


def test_the_speed_is_measured_over_a_window_not_one_reading() -> None:
    s = ShareSteer()
    for t, done, alloc in ((1.0, 0.0, 0.5), (2.0, 8.0, 0.5), (3.0, 8.0, 0.5), (4.0, 16.0, 0.5)):
        s.observe(obs(None, done, alloc=alloc, time=t))  # readings every other period
    assert s.speed == pytest.approx(16.0 / (3 * 0.5))  # not 0 or 16 units per period


def test_what_the_budget_cannot_buy_is_reported() -> None:
    s = ShareSteer()
    measured(s, 40.0)
    d = s.reconfigure(obs(3.2, 40.0), cap=0.0015)
    assert s.at_risk is not None and "its budget allows 0.0015" in s.at_risk
    assert sum(d.bids["a/vm1"].values()) <= 0.0015 + 1e-12
    assert "deadline at risk" in d.reason
    s.reconfigure(obs(3.2, 0.0, time=13.5), cap=10.0)  # 80 left in 0.5 s: not even the VM
    assert s.at_risk is not None and "more than the whole VM" in s.at_risk


def test_vertical_deadline_steering_by_share_starts_at_once_and_never_suspends() -> None:
    ctl = VerticalDeadline(steer="share")
    start = ctl.decide(obs(None, 0.0, time=0.0, vms=False))
    assert start.action is Action.START and start.new_vm_bid["cpu"] > 0.001
    for t in (2.0, 3.0, 4.0):  # far behind and poor: bids what it can, stays running
        d = ctl.decide(obs(1.0, 5.0, time=t, balance=0.01))
        assert d.action is Action.NONE
    assert ctl.share is not None and ctl.share.at_risk is not None
    assert VerticalDeadline().share is None  # the simulator's default: Themis Fig. 4


def test_the_parameters_are_checked_and_the_live_service_steers_by_share() -> None:
    with pytest.raises(PolicyError, match="steer: must be one of scale, share"):
        make_policy("vertical-deadline", steer="fast")
    with pytest.raises(PolicyError, match=r"margin: must be a finite number in \[0, 10\]"):
        make_policy("deadline-strict", steer="share", margin=-1)
    assert live_params("vertical-deadline", {}) == {"steer": "share"}
    assert live_params("merkat-vertical", {"steer": "scale"}) == {"steer": "scale"}
    assert live_params("best-effort", {"start_fraction": 0.5}) == {"start_fraction": 0.5}
    for name in ("vertical-deadline", "merkat-vertical", "deadline-strict"):
        assert make_policy(name, **live_params(name, {})).share is not None  # type: ignore[attr-defined]
