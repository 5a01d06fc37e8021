"""The plan and the bills of a period (merkat.core.plan), vectorised with numpy, against
their per-VM definitions: the same operations, allocations and micro-credits, exactly."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.control.registry import make_policy
from merkat.control.types import VMState
from merkat.core.draft import draft
from merkat.core.market_input import Run, market_vms
from merkat.core.model import App, AppSpec, Ops, VMRecord, to_micro
from merkat.core.period import Platform
from merkat.core.plan import Bills, Plans, bills_of, make_plan
from merkat.market import NO_HOST, RESOURCES, Hosts
from test_sim_changed import check_changed


class _Placed:
    def __init__(self, host: np.ndarray, allocation: np.ndarray) -> None:
        self.host, self.allocation = host, allocation


def _runs(rng: np.random.Generator, platform: Platform) -> list[tuple[App, list[VMRecord]]]:
    """Applications trading the CPU, or CPU and memory, with placed, new and resuming VMs,
    VMs that share one bid mapping and VMs with their own."""
    runs = []
    for a in range(int(rng.integers(1, 6))):
        trade = ("cpu",) if rng.random() < 0.5 else ("memory", "cpu")
        spec = AppSpec(f"a{a}", "best-effort", 1, {"cpu": 1.0, "memory": 512.0}, 0.0, 100.0,
                       trade=trade)
        app = App(spec, make_policy("best-effort"), f"app:a{a}")
        shared = {r: float(rng.uniform(0.001, 3.0)) for r in trade}
        for v in range(int(rng.integers(1, 7))):
            own = {r: float(rng.uniform(0.001, 3.0)) for r in trade}
            state = VMState.RESUMING if rng.random() < 0.2 else VMState.RUNNING
            vm = VMRecord(f"a{a}/vm{v}", spec.id, state, bid=shared if rng.random() < 0.7 else own)
            if rng.random() < 0.6:  # placed before (else new: no host yet)
                vm.host, vm.new = int(rng.integers(0, 4)), False
                vm.alloc = {r: 0.25 for r in trade}
            app.vms.append(vm)
        runs.append((app, app.vms))
    return runs


def _market(platform: Platform, runs: list[tuple[App, list[VMRecord]]]) -> list[Run]:
    """The runs as the market takes them: each application's next state (drafted from its
    record, which make_plan must leave alone)."""
    return [(draft(app), platform.decider.const(app), None) for app, _ in runs]


def _reference_bills(runs: list[tuple[App, list[VMRecord]]],
                     prices: dict[str, float]) -> tuple[dict[str, int], dict[str, int]]:
    """The per-VM definition (the code before numpy): each VM with a host is billed its bid
    and uses its allocation x price, rounded per VM, at most the bid."""
    bills: dict[str, int] = {}
    usage: dict[str, int] = {}
    for app, vms in runs:
        placed = [vm for vm in vms if vm.host != NO_HOST]
        if placed:
            x = [to_micro(sum(vm.bid.values())) for vm in placed]
            u = [min(to_micro(sum(a * prices[r] for r, a in vm.alloc.items())), b)
                 for vm, b in zip(placed, x, strict=True)]
            bills[app.spec.id] = sum(x)
            usage[app.spec.id] = sum(u)
    return bills, usage


@pytest.mark.parametrize("min_array", [0, 10**9])  # the bills in numpy, in plain Python
@pytest.mark.parametrize("seed", range(40))
def test_plan_and_bills_match_their_per_vm_definitions(
        seed: int, min_array: int, monkeypatch: pytest.MonkeyPatch) -> None:
    from merkat.core import bills as bills_mod

    monkeypatch.setattr(bills_mod, "MIN_ARRAY_BILLS", min_array)
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    runs = _runs(rng, platform)
    market = _market(platform, runs)
    n = sum(len(vms) for _, vms in runs)
    vms = market_vms(market, n)
    before = [(vm.host, vm.new, vm.state, dict(vm.alloc)) for _, v in runs for vm in v]
    host = rng.integers(0, 4, n)
    host[rng.random(n) < 0.2] = NO_HOST  # not placed this period
    allocation = rng.uniform(0.0, 1.0, (n, len(RESOURCES)))
    plan = make_plan(0.0, 300.0, market, _Placed(host, allocation), Ops(["gone"], []),
                     vms.host)

    flat = [vm for _, v in runs for vm in v]
    nexts = [(nx, k) for nx, _, _ in market for k in range(len(nx.ids))]
    create, resume, migrate, allocations = [], [], [], {}
    for i, (vm, (src, new, state, alloc)) in enumerate(zip(flat, before, strict=True)):
        nx, k = nexts[i]
        assert (vm.host, vm.new, vm.state, vm.alloc) == (src, new, state, alloc)  # untouched
        h = int(host[i])
        if h == NO_HOST:
            assert nx.hosts[k] == src and nx.allocs[k] == dict.fromkeys(vm.bid, 0.0)  # nothing
            vm.alloc = nx.allocs[k]  # as the commit writes it, for the bills below
            continue
        if new:
            (resume if state is VMState.RESUMING else create).append((vm.id, h))
        elif h != src:
            migrate.append((vm.id, src, h))
        assert nx.hosts[k] == h and not nx.fresh[k]
        expected = {r: float(allocation[i, RESOURCES.index(r)]) for r in vm.bid}
        assert nx.allocs[k] == expected
        allocations[vm.id] = expected
        vm.host, vm.alloc = h, expected  # as the commit writes them, for the bills below
    assert [(p.vm, p.host) for p in plan.create] == create
    assert [(p.vm, p.host) for p in plan.resume] == resume
    assert list(plan.migrate) == migrate
    assert plan.allocations == allocations and list(plan.allocations) == list(allocations)
    assert plan.destroy == ("gone",)

    prices = {"cpu": float(rng.uniform(0.1, 5.0)), "memory": float(rng.uniform(0.0, 0.01))}
    bills, usage = bills_of(market, host, vms.host, allocation, vms.bid, prices)
    want_bills, want_usage = _reference_bills(runs, prices)
    assert dict(bills) == want_bills and dict(usage) == want_usage
    assert [a for a, _ in bills] == sorted(want_bills)
    # the newcomers of an admission: the tail of the arrays
    k = len(runs[0][1])
    tail = bills_of(market[1:], host, vms.host, allocation, vms.bid, prices, start=k)
    assert dict(tail[0]) == {a: b for a, b in want_bills.items() if a != runs[0][0].spec.id}


@pytest.mark.parametrize("seed", range(10))
def test_the_bills_of_a_reused_clearing_are_the_last_ones_only_for_the_same_rows(seed: int
                                                                               ) -> None:
    """``Bills`` answers from memory only for the same clearing (identity), the same
    applications holding the same rows, and the same prices; any other call is computed."""
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    market = _market(platform, _runs(rng, platform))
    n = sum(len(nx.ids) for nx, _, _ in market)
    vms = market_vms(market, n)
    result = _Placed(rng.integers(0, 4, n), rng.uniform(0.0, 1.0, (n, len(RESOURCES))))
    prices = {"cpu": 2.0, "memory": 0.001}
    memo = Bills()
    first = memo(market, result, vms.host, vms.bid, prices)
    assert first == bills_of(market, result.host, vms.host, result.allocation, vms.bid, prices)
    assert memo(market, result, vms.host, vms.bid, dict(prices)) is first  # remembered
    # the same arrays in a new clearing, other prices, or one VM fewer: computed again
    again = _Placed(result.host.copy(), result.allocation * 0.5)
    assert memo(market, again, vms.host, vms.bid, prices) == bills_of(
        market, again.host, vms.host, again.allocation, vms.bid, prices)
    cheaper = {"cpu": 1.0, "memory": 0.001}
    assert memo(market, again, vms.host, vms.bid, cheaper) == bills_of(
        market, again.host, vms.host, again.allocation, vms.bid, cheaper)
    nx, const, _ = market[-1]
    fewer = [*market[:-1], (nx, const, list(range(len(nx.ids) - 1)))]
    m = n - 1
    assert memo(fewer, again, vms.host[:m], vms.bid[:m], cheaper) == bills_of(
        fewer, again.host, vms.host[:m], again.allocation, vms.bid[:m], cheaper)


@pytest.mark.parametrize("seed", range(10))
def test_a_quiet_period_reuses_the_last_plan_only_when_every_vm_keeps_its_allocation(
        seed: int) -> None:
    """``Plans`` gives what ``make_plan`` gives; it reuses the last plan's allocations for
    the same clearing when no VM moves and every VM holds the mapping the last plan gave it,
    and computes again when one mapping is another object (equal or not)."""
    from merkat.core.draft import copy

    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    market = _market(platform, _runs(rng, platform))
    n = sum(len(nx.ids) for nx, _, _ in market)
    vms = market_vms(market, n)
    host = np.where(vms.host == NO_HOST, rng.integers(0, 4, n), vms.host)
    result = _Placed(host, rng.uniform(0.0, 1.0, (n, len(RESOURCES))))
    memo = Plans()
    first = memo(0.0, 300.0, market, result, Ops(), vms.host)
    # the next period: the committed state (hosts as placed), drafted again; the same clearing
    placed = host.copy()
    again = [(copy(nx), const, rows) for nx, const, rows in market]
    second = memo(300.0, 300.0, again, result, Ops(["x"], []), placed)
    fresh = [(copy(nx), const, rows) for nx, const, rows in market]
    want = make_plan(300.0, 300.0, fresh, result, Ops(["x"], []), placed)
    assert second == want and second.destroy == ("x",) and second.time == 300.0
    assert second.allocations is first.allocations  # reused
    assert [nx.allocs for nx, _, _ in again] == [nx.allocs for nx, _, _ in fresh]
    # one VM holds an equal but new mapping: computed again (the same plan's content)
    nx0 = again[0][0]
    nx0.allocs[0] = dict(nx0.allocs[0])
    third = memo(600.0, 300.0, again, result, Ops(), placed)
    assert third.allocations is not first.allocations
    assert third.allocations == first.allocations
    # another clearing: computed again
    other = _Placed(host, result.allocation * 0.5)
    assert memo(900.0, 300.0, again, other, Ops(), placed).allocations != first.allocations


def _cpu_app(a: int, vms: int) -> App:
    """Application ``a`` trading the CPU only, with ``vms`` running VMs that bid 0.5 and
    have no host yet."""
    spec = AppSpec(f"a{a}", "best-effort", 1, {"cpu": 1.0}, 0.0, 100.0, trade=("cpu",))
    app = App(spec, make_policy("best-effort"), f"app:a{a}")
    app.vms.extend(VMRecord(f"a{a}/vm{v}", spec.id, VMState.RUNNING, bid={"cpu": 0.5})
                   for v in range(vms))
    return app


@pytest.mark.parametrize("min_column", [0, 10**9])  # the numpy column pass, the plain one
@pytest.mark.parametrize("seed", range(20))
def test_the_one_column_pass_gives_the_per_application_loop_s_plan(
        seed: int, min_column: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every application trades the CPU only and every VM is placed (the usual market):
    ``make_plan`` takes one pass over the joined VMs; the plan, the next states' mappings
    (the ones kept, by identity, and the ones replaced) and the allocations' order are the
    per-application loop's."""
    from merkat.core import plan as plan_mod
    from merkat.core.draft import copy

    monkeypatch.setattr(plan_mod, "MIN_COLUMN_VMS", min_column)
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    runs = []
    for a in range(int(rng.integers(1, 8))):
        app = _cpu_app(a, int(rng.integers(1, 5)))
        for vm in app.vms:
            if rng.random() < 0.8:
                vm.host, vm.new = int(rng.integers(0, 4)), False
                vm.alloc = {"cpu": float(rng.choice([0.25, 0.5]))}
                if rng.random() < 0.1:
                    vm.alloc = {"cpu": 0.25, "memory": 1.0}  # not of its shape: replaced
                elif rng.random() < 0.1:
                    vm.alloc = {}  # none yet (read as NaN by the column pass): replaced
                elif rng.random() < 0.1:
                    vm.alloc = {"cpu": 1}  # an int equal to the float: kept
        runs.append((app, app.vms))
    market = _market(platform, runs)
    n = sum(len(nx.ids) for nx, _, _ in market)
    vms = market_vms(market, n)
    host = np.where(vms.host == NO_HOST, rng.integers(0, 4, n), vms.host)
    allocation = np.zeros((n, len(RESOURCES)))
    allocation[:, 0] = rng.choice([0.25, 0.5, 1.0, 0.0, -0.0], n)
    if seed % 4 == 0:  # every mapping replaced, or every one kept
        allocation[:, 0] = 0.75 if seed % 8 else [
            nx.allocs[k].get("cpu", 0.5) for nx, _, _ in market for k in range(len(nx.ids))]
    result = _Placed(host, allocation)
    fast = [(copy(nx), const, rows) for nx, const, rows in market]
    slow = [(copy(nx), const, rows) for nx, const, rows in market]
    assert plan_mod._one_column(fast) == ("cpu", 0)
    got = make_plan(0.0, 300.0, fast, result, Ops(), vms.host)
    monkeypatch.setattr(plan_mod, "_one_column", lambda runs: None)
    want = make_plan(0.0, 300.0, slow, result, Ops(), vms.host)
    assert got == want and list(got.allocations) == list(want.allocations)
    for (f, _, _), (s, _, _), (orig, _, _) in zip(fast, slow, market, strict=True):
        assert f.allocs == s.allocs and f.hosts == s.hosts and f.fresh == s.fresh
        # the same mappings kept (the record's own) and the same ones replaced
        assert [a is o for a, o in zip(f.allocs, orig.allocs, strict=True)] == [
            a is o for a, o in zip(s.allocs, orig.allocs, strict=True)]


@pytest.mark.parametrize("seed", range(10))
def test_an_application_in_two_runs_is_billed_once_for_both(seed: int) -> None:
    """Runs that split one application's VMs (rows) add up to one bill and one usage, as the
    application in one run; the bills stay in id order."""
    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    market = _market(platform, _runs(rng, platform))
    n = sum(len(nx.ids) for nx, _, _ in market)
    vms = market_vms(market, n)
    host = rng.integers(0, 4, n)
    allocation = rng.uniform(0.0, 1.0, (n, len(RESOURCES)))
    prices = {"cpu": float(rng.uniform(0.1, 5.0)), "memory": float(rng.uniform(0.0, 0.01))}
    whole = bills_of(market, host, vms.host, allocation, vms.bid, prices)
    split = []
    for nx, const, _ in market:
        cut = len(nx.ids) // 2
        split += [(nx, const, list(range(cut))), (nx, const, list(range(cut, len(nx.ids))))]
    split = [r for r in split if r[2]]
    assert bills_of(split, host, vms.host, allocation, vms.bid, prices) == whole
    assert [a for a, _ in whole[0]] == sorted(nx.id for nx, _, _ in market)


@pytest.mark.parametrize("seed", range(12))
def test_plans_compare_a_new_clearing_with_the_last_one_column_as_make_plan_does(
        seed: int) -> None:
    """Period after period, the same VMs (the usual market: CPU only, every VM placed) and a
    new clearing each time: ``Plans`` compares the new column with the last plan's instead of
    reading the mappings (``_one_column_allocations``' ``prior``); the plan, the allocations'
    order, the mappings kept (by identity) and replaced are ``make_plan``'s; when no value
    changed, the last plan's allocations are given again (the same mapping). Values repeat,
    zeros of both signs, NaN, and a VM set that changes or a mapping replaced between two
    plans (then nothing is compared with the last column)."""
    from merkat.core.draft import copy

    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    apps = []
    for a in range(int(rng.integers(1, 6))):
        app = _cpu_app(a, int(rng.integers(1, 6)))
        for vm in app.vms:
            vm.host, vm.new = int(rng.integers(0, 4)), False
            vm.alloc = {"cpu": 0.5}
        apps.append((app, app.vms))
    market = _market(platform, apps)
    memo = Plans()
    last = None
    reused = told = 0
    for step in range(25):
        if step % 9 == 8:  # one VM less: another key, nothing compared
            market = [(copy(nx), const, rows) for nx, const, rows in market]
            nx = market[0][0]
            if len(nx.ids) > 1:
                for col in (nx.ids, nx.states, nx.bids, nx.hosts, nx.fresh, nx.allocs):
                    del col[-1]
        if step % 7 == 6:  # a mapping replaced by an equal one: read again
            nx = market[-1][0]
            nx.allocs[0] = dict(nx.allocs[0])
        n = sum(len(nx.ids) for nx, _, _ in market)
        vms = market_vms(market, n)
        allocation = np.zeros((n, len(RESOURCES)))
        if last is not None and len(last) == n and rng.random() < 0.3:
            allocation[:, 0] = last  # nothing changes
        else:
            allocation[:, 0] = rng.choice([0.25, 0.5, 1.0, 0.0, -0.0, np.nan], n,
                                          p=[0.3, 0.3, 0.2, 0.08, 0.07, 0.05])
        last = allocation[:, 0].copy()
        result = _Placed(vms.host.copy(), allocation)
        fast = [(copy(nx), const, rows) for nx, const, rows in market]
        slow = [(copy(nx), const, rows) for nx, const, rows in market]
        before = memo._last[3].allocations if memo._last is not None else None
        got = memo(300.0 * step, 300.0, fast, result, Ops(), vms.host)
        want = make_plan(300.0 * step, 300.0, slow, result, Ops(), vms.host)
        assert repr(got) == repr(want) and list(got.allocations) == list(want.allocations)
        if got.allocations is before:
            reused += 1
        elif got.allocations is not None:  # (a new plan: what it tells is against before)
            told += check_changed(got.allocations, before)
        for (f, _, _), (s, _, _), (orig, _, _) in zip(fast, slow, market, strict=True):
            assert repr(f.allocs) == repr(s.allocs)
            assert [a is o for a, o in zip(f.allocs, orig.allocs, strict=True)] == [
                a is o for a, o in zip(s.allocs, orig.allocs, strict=True)]
        market = fast  # committed: the next period drafts these
    assert reused > 0 and told > 0


@pytest.mark.parametrize("seed", range(30))
def test_the_plain_bills_are_the_numpy_bills(seed: int, monkeypatch: pytest.MonkeyPatch
                                             ) -> None:
    """``bills_of`` below ``MIN_ARRAY_BILLS`` VMs (plain Python) and above (numpy) give the
    same micro-credits: applications trading the same or different resources, VMs placed,
    kept where they were or nowhere, zero allocations of both signs, halves that round to
    even, an admission's tail (``start``)."""
    from merkat.core import bills as bills_mod

    rng = np.random.default_rng(seed)
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[1.0, 4096.0]] * 4)))
    market = _market(platform, _runs(rng, platform))
    n = sum(len(nx.ids) for nx, _, _ in market)
    vms = market_vms(market, n)
    bid = vms.bid.copy()
    bid[rng.random(n) < 0.2] = [0.0000005, 0.0000015]  # halves of a micro-credit
    host = rng.integers(0, 4, n)
    host[rng.random(n) < 0.3] = NO_HOST
    before = vms.host.copy()
    before[rng.random(n) < 0.5] = NO_HOST
    allocation = rng.choice([0.0, -0.0, 0.25, 1.0 / 3.0, 0.5], (n, len(RESOURCES)))
    prices = {"cpu": float(rng.choice([1.0, 2.5, 0.1])), "memory": float(rng.choice([0.0, 0.001]))}
    runs, start = market, 0
    if seed % 3 == 0 and len(market) > 1:  # an admission's newcomers: the arrays' tail
        runs, start = market[1:], len(market[0][0].ids)
    got = []
    for min_array in (0, 10**9):
        monkeypatch.setattr(bills_mod, "MIN_ARRAY_BILLS", min_array)
        got.append(bills_of(runs, host, before, allocation, bid, prices, start=start))
    assert got[0] == got[1]
    assert all(type(v) is int for part in got[1] for _, v in part)
