"""The period's market input (merkat.core.market_input): ``MarketInput`` reuses the last
input only when every application bids with the same VMs, hosts, bid mappings and rows, and
otherwise gives what ``market_vms`` gives, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.control.registry import make_policy
from merkat.control.types import AppStatus, VMState
from merkat.core import market_input
from merkat.core.draft import draft, own
from merkat.core.market_input import MarketInput, Run, bidding, market_vms, size
from merkat.core.model import App, AppSpec, VMRecord
from merkat.core.period import Platform
from merkat.market import NO_HOST, RESOURCES, Hosts, VMs
from test_market_support import random_run


def _same(a: VMs, b: VMs) -> None:
    assert a.ids == b.ids
    for x, y in ((a.bid, b.bid), (a.cap, b.cap), (a.host, b.host), (a.minimum, b.minimum)):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


def _reference(runs: list[Run], n: int) -> VMs:
    """The market's input VM by VM (the code before the flat lists): each application's
    rows, its bid mapping's row repeated when all its VMs share it."""
    ids, hosts, bids, caps, mins = [], [], [], [], []
    for nx, const, rows in runs:
        at = range(len(nx.ids)) if rows is None else rows
        for k in at:
            ids.append(nx.ids[k])
            hosts.append(nx.hosts[k])
            bids.append([nx.bids[k].get(r, 0.0) for r in RESOURCES])
            caps.append(const.cap_row)
            mins.append(const.min_row)
    shape = (n, len(RESOURCES))
    return VMs(tuple(ids), np.array(bids, dtype=np.float64).reshape(shape),
               np.array(caps, dtype=np.float64).reshape(shape),
               np.array(hosts, dtype=np.int64), np.array(mins, dtype=np.float64).reshape(shape))


def _apps(rng: np.random.Generator) -> list[App]:
    apps = []
    for a in range(4):
        trade = ("cpu",) if a % 2 else ("memory", "cpu")
        spec = AppSpec(f"a{a}", "best-effort", 1, {"cpu": 1.0, "memory": 512.0}, 0.0, 100.0,
                       trade=trade, vm_min={"memory": 64.0 * a})
        app = App(spec, make_policy("best-effort"), f"app:a{a}", status=AppStatus.RUNNING)
        shared = {r: float(rng.uniform(0.01, 2.0)) for r in trade}
        for v in range(int(rng.integers(1, 5))):
            own = {r: float(rng.uniform(0.01, 2.0)) for r in trade}
            state = VMState.SUSPENDED if rng.random() < 0.15 else VMState.RUNNING
            host = int(rng.integers(0, 3)) if rng.random() < 0.8 else NO_HOST
            app.vms.append(VMRecord(f"a{a}/vm{v}", spec.id, state, host=host,
                                    bid=shared if rng.random() < 0.7 else own))
        apps.append(app)
    return apps


def _runs(platform: Platform, apps: list[App]) -> list[Run]:
    return bidding([draft(a) for a in apps], {a.spec.id: a for a in apps},
                   platform.decider.const)


def _first_input(seed: int) -> tuple[np.random.Generator, Platform, list[App], MarketInput,
                                     VMs]:
    """Random applications on three hosts (:func:`_apps`) and a cache given their first
    input: the generator, platform, applications, cache and that input."""
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(("h0", "h1", "h2"), np.array([[2.0, 4096.0]] * 3)))
    apps = _apps(rng)
    memo = MarketInput()
    runs = _runs(platform, apps)
    return rng, platform, apps, memo, memo(runs, size(runs))


@pytest.mark.parametrize("seed", range(8))
def test_the_last_input_is_reused_only_for_the_same_vms_hosts_and_bid_mappings(
        seed: int) -> None:
    _, platform, apps, memo, first = _first_input(seed)
    runs = _runs(platform, apps)
    _same(first, market_vms(runs, size(runs)))
    _same(first, _reference(runs, size(runs)))
    again = _runs(platform, apps)  # the next period drafts the same records again
    assert memo(again, size(again)) is first
    for nx, _, _ in again:  # make_plan moves the next states' hosts after the clearing
        own(nx)  # (as make_plan does: the record's lists are shared, copy on write)
        nx.hosts[:] = [0] * len(nx.hosts)
    assert memo(_runs(platform, apps), size(runs)) is first  # (the copy it kept, not those)

    def changed(write) -> None:  # type: ignore[no-untyped-def]
        write()
        runs = _runs(platform, apps)
        got = memo(runs, size(runs))
        assert got is not first
        _same(got, market_vms(runs, size(runs)))
        _same(got, _reference(runs, size(runs)))
        assert memo(_runs(platform, apps), size(runs)) is got

    vm = apps[0].vms[0]
    changed(lambda: setattr(vm, "bid", dict(vm.bid)))  # an equal mapping, another object
    changed(lambda: setattr(vm, "bid", {r: 3.0 for r in vm.bid}))
    changed(lambda: setattr(apps[1].vms[0], "host", 2 if apps[1].vms[0].host != 2 else 1))
    changed(lambda: setattr(apps[2].vms[0], "state",
                            VMState.SUSPENDED if apps[2].vms[0].state is VMState.RUNNING
                            else VMState.RUNNING))
    changed(lambda: apps[3].vms.append(VMRecord("a3/vm9", "a3", VMState.BOOTING,
                                                bid=apps[3].vms[0].bid)))
    changed(lambda: apps.pop(1))


@pytest.mark.parametrize("seed", range(2))
def test_every_period_of_a_run_gets_the_input_market_vms_gives(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Random applications on six hosts over twelve periods (arrivals, rebids, migrations,
    ends): the platform's input against a fresh ``market_vms`` at every period, and the last
    one is reused in some periods; the unchanged applications' ids and hosts are taken from
    the last input by the identity of their record's lists (``MarketInput.kept_ids``)."""
    calls = reused = kept_ids = 0
    cached = MarketInput.__call__

    def checking(self, runs, n):  # type: ignore[no-untyped-def]
        nonlocal calls, reused, kept_ids
        last = self._last
        out = cached(self, runs, n)
        kept_ids += self.kept_ids
        _same(out, market_input.market_vms(runs, n))
        _same(out, _reference(runs, n))
        calls += 1
        reused += last is not None and out is last
        return out

    monkeypatch.setattr(MarketInput, "__call__", checking)
    random_run(seed, apps=16, over=3, periods=12, work=1500.0,
               best_effort=lambda k, rng: k % 4 != 0)
    assert calls >= 8 and 0 < reused < calls and kept_ids > 0


@pytest.mark.parametrize("seed", range(10))
def test_a_new_bid_or_host_patches_the_last_input_as_market_vms_builds_it(seed: int) -> None:
    """The same VMs with some bid mappings replaced (equal, other values, an int, one shared
    by all an application's VMs or not) or hosts moved: the input is the last one's arrays
    with those applications' rows built again and the others' kept (``MarketInput.kept``), byte for byte ``market_vms``'s; a bid that
    is negative, NaN or infinite is not patched in: the full build names it."""
    from merkat.market import MarketError

    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(("h0", "h1", "h2"), np.array([[2.0, 4096.0]] * 3)))
    apps = _apps(rng)
    memo = MarketInput()
    runs = _runs(platform, apps)
    memo(runs, size(runs))
    patched = 0
    for step in range(20):
        app = apps[int(rng.integers(0, len(apps)))]
        k = int(rng.integers(0, len(app.vms)))
        pick = rng.random()
        bad = False
        if pick < 0.5:
            value = float(rng.choice([0.0, 0.5, 1.5, 2.0]))
            bid = {r: value for r in app.vms[k].bid}
            for vm in app.vms if rng.random() < 0.5 else [app.vms[k]]:
                vm.bid = bid
        elif pick < 0.6:
            app.vms[k].bid = {r: 1 for r in app.vms[k].bid}  # an int
        elif pick < 0.7:
            bad = step % 2 == 0
            app.vms[k].bid = {r: float(rng.choice([-1.0, np.nan, np.inf])) if bad else 0.25
                              for r in app.vms[k].bid}
        else:
            vm = app.vms[k]
            vm.host = (vm.host + 1) % 3 if vm.host != NO_HOST else 0
        runs = _runs(platform, apps)
        n = size(runs)
        last = memo._last
        if bad and app.vms[k].state is not VMState.SUSPENDED:  # (it bids)
            with pytest.raises(MarketError):
                market_vms(runs, n)
            with pytest.raises(MarketError):
                memo(runs, n)
            app.vms[k].bid = {r: 0.5 for r in app.vms[k].bid}
            continue
        got = memo(runs, n)
        _same(got, market_vms(runs, n))
        _same(got, _reference(runs, n))
        assert got.bid.flags.c_contiguous and got.host.dtype == np.int64
        patched += last is not None and got is not last and memo.kept > 0
    assert patched > 0


@pytest.mark.parametrize("seed", range(6))
def test_rows_kept_per_application_in_any_order_and_subset(seed: int) -> None:
    """The applications in random orders and subsets from one input to the next (an
    arrival between two applications, an end in the middle, as the admission points make
    them), with bids replaced and hosts moved on the way: each input byte for byte
    ``market_vms``'s, and the unchanged applications' rows kept (``MarketInput.kept``
    counts the rows taken from the input before)."""
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(("h0", "h1", "h2"), np.array([[2.0, 4096.0]] * 3)))
    apps = _apps(rng)
    memo = MarketInput()
    kept = 0
    for _ in range(25):
        if rng.random() < 0.3:
            vm = apps[int(rng.integers(0, len(apps)))].vms[0]
            vm.bid = {r: float(rng.uniform(0.0, 2.0)) for r in vm.bid}
        if rng.random() < 0.3:
            vm = apps[int(rng.integers(0, len(apps)))].vms[-1]
            vm.host = (vm.host + 1) % 3 if vm.host != NO_HOST else 0
        chosen = [apps[k] for k in rng.permutation(len(apps))[: int(rng.integers(0, 5))]]
        runs = _runs(platform, chosen)
        n = size(runs)
        got = memo(runs, n)
        _same(got, market_vms(runs, n))
        _same(got, _reference(runs, n))
        kept += memo.kept
    assert kept > 0


@pytest.mark.parametrize("seed", range(4))
def test_a_rebid_keeps_the_cap_and_minimum_rows(seed: int) -> None:
    """A rebid (new bid mappings, the same VMs and constant parts) builds only the bid rows:
    when no application joins, leaves or changes its VMs, the new input's cap and minimum
    arrays are the last input's own (no copy), its bids new, and the whole input byte for
    byte ``market_vms``'s and the VM-by-VM reference; a bad new bid still gives the full
    build's error, which names it."""
    rng, platform, apps, memo, first = _first_input(seed)
    for app in apps:  # every VM rebids (the first half of the applications only, then all)
        for vm in app.vms[: len(app.vms) if seed % 2 else 1]:
            vm.bid = {r: float(rng.uniform(0.01, 2.0)) for r in vm.bid}
    runs = _runs(platform, apps)
    got = memo(runs, size(runs))
    _same(got, market_vms(runs, size(runs)))
    _same(got, _reference(runs, size(runs)))
    assert got.cap is first.cap and got.minimum is first.minimum
    assert got.bid is not first.bid and memo.kept < size(runs)
    apps[0].vms[0].bid = {r: -1.0 for r in apps[0].vms[0].bid}
    runs = _runs(platform, apps)
    with pytest.raises(ValueError, match="bid"):
        memo(runs, size(runs))
