"""The grid-cloud model: eq. 1-4 on hand-computed cases, the TAM's allocations and energy
tie-breaks, placement, idle switch-off, the DIET hierarchy, users' queues, money and
capacity properties, determinism."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.worlds.gridcloud import diet
from merkat.worlds.gridcloud.model import (
    ACTIVE,
    CATALOG,
    CLUSTERS,
    IDLE,
    NEW,
    Offer,
    Task,
)
from merkat.worlds.gridcloud.provider import Allocation, Provider
from merkat.worlds.gridcloud.run import Config, Group, Simulation, simulate
from merkat.worlds.gridcloud.users import (
    PRIORITIES,
    UTILITIES,
    Load,
    StoredTasks,
    Strategy,
    by_importance,
    by_risk,
    generate_tasks,
)

U = UTILITIES["cost-time"]


def task(c: float = 1e6, m: float = 10, d: float = 20, *, tid: int = 0, created: float = 0.0,
         deadline: float = 1e12, importance: float = 1.0) -> Task:
    return Task(tid, 0, created, c, m, d, deadline, importance, False)


def provider(cluster: str = "small", pe_offers: int | None = 4) -> Provider:
    return Provider([CLUSTERS[cluster]], CATALOG, pe_offers=pe_offers)


# --- eq. 1, 3, 4 ---------------------------------------------------------------------------


def test_eq1_price_of_a_task_at_the_initial_prices() -> None:
    # P_c c + P_m m + P_d d = 100·10⁶ + 10,000·10 + 10,000·20
    assert provider().price_of(task()) == pytest.approx(100_300_000.0)


def test_eq3_eq4_new_vm_on_an_empty_small_cluster_only_normal_fits() -> None:
    # Small hosts have 2 CPUs: Large (4 PEs) and Extra-large (8 PEs) cannot be placed.
    allocs = provider().allocations(task(), 0.0)
    assert [(a.kind, CATALOG[a.vm].name) for a in allocs] == [(NEW, "normal")]
    (a,) = allocs
    assert a.time == pytest.approx(1 + 1e6 / 6000)  # V^START + c / V^s
    assert a.cost == pytest.approx(0 + 100_300_000.0)  # V^COST + eq. 1


def test_eq3_every_catalog_type_on_a_standard_cluster() -> None:
    allocs = provider("standard").allocations(task(9e5), 0.0)
    times = {CATALOG[a.vm].name: a.time for a in allocs}
    assert times == pytest.approx(
        {"normal": 1 + 150.0, "large": 1 + 150.0, "extra-large": 1 + 100.0})


def test_start_cost_is_added_to_a_new_vm_offer() -> None:
    from dataclasses import replace

    cat = (replace(CATALOG[0], start_cost=5.0, start_time=3.0),)
    p = Provider([CLUSTERS["small"]], cat)
    (a,) = p.allocations(task(6000, 10, 10), 0.0)
    assert (a.time, a.cost) == pytest.approx((3 + 1.0, 5 + 100 * 6000 + 10_000 * 20))


# --- eq. 2 and idle VMs --------------------------------------------------------------------


def test_eq2_active_pe_offer_waits_for_the_remaining_and_queued_work() -> None:
    p = provider()
    first = p.run_task(task(6e5), Offer(1e9, 1e12, 0), 0.0, U)
    assert first is not None and first.new_vm
    assert (first.start, first.end) == pytest.approx((1.0, 101.0))  # ready after 1 s
    second = p.assign(task(3e5), p.allocations(task(3e5), 0.0)[0], 0.0)
    assert (second.vm, second.start, second.end) == (first.vm, 101.0, 151.0)
    # at t = 31: c_0 = (101 - 31)·6000 = 420,000 MI left, queue 300,000, task 1.2·10⁶
    allocs = p.allocations(task(1.2e6), 31.0)
    active = [a for a in allocs if a.kind == ACTIVE]
    assert len(active) == 1
    assert active[0].time == pytest.approx((420_000 + 300_000 + 1.2e6) / 6000)
    assert active[0].time == pytest.approx(151 - 31 + 200)


def test_idle_vm_offer_and_idle_switch_off() -> None:
    p = provider()
    placed = p.run_task(task(6e5), Offer(1e9, 1e12, 0), 0.0, U)
    assert placed is not None
    p.complete(placed.vm, placed.pe)
    allocs = p.allocations(task(6e5), 200.0)
    idle = [a for a in allocs if a.kind == IDLE]
    assert len(idle) == 1 and idle[0].time == pytest.approx(100.0)
    assert p.stop_idle(101.0 + 600.0, 600.0) == []  # idle for exactly 600 s: kept
    assert p.stop_idle(101.0 + 600.5, 600.0) == [placed.vm]
    assert p.vms == {}
    h = p.hosts[0]
    assert h.cpu_free == [12000.0, 12000.0] and h.vms == 0
    assert h.memory_free == CLUSTERS["small"].host.memory


def test_memory_and_disk_at_tb_exclude_a_pe() -> None:
    # An Extra-large VM (1,690 GB disk) on a Standard cluster with 7 PEs each holding a long
    # 100 GB task and one PE with a 1,000 GB task: a 100 GB task fits only where the disk
    # freed at t_b allows.
    p = provider("standard", pe_offers=None)
    xl = p.start_vm(CATALOG[2], 0.0)
    for pe in range(8):
        d = 990.0 if pe == 0 else 100.0
        c = 9e5 if pe == 0 else 9e6  # PE 0 ends at 101 s, the others at 1,001 s
        p.assign(task(c, 10, d), Allocation(0, 0, ACTIVE, xl.id, pe, (0, 0, 0, 0)), 0.0)
    # disk used by the VM: 990 + 700 = 1,690 = V^d. A new 100 GB task:
    allocs = [a for a in p.allocations(task(9e5, 10, 100), 50.0) if a.kind == ACTIVE]
    # on PE 0 (t_b = 101): others use 700 GB -> 990 free: fits; on PE k > 0 (t_b = 1,001):
    # PE 0 is free then, others (6 x 100) -> 1,090 free: fits too.
    assert sorted(a.pe for a in allocs) == list(range(8))
    big = [a for a in p.allocations(task(9e5, 10, 1000), 50.0) if a.kind == ACTIVE]
    # 1,000 GB: PE 0 at t_b=101 has 990 free (no); PE k at t_b=1,001 has 1,090 (yes)
    assert sorted(a.pe for a in big) == list(range(1, 8))


# --- §3.3.3 tie-breaks and §3.3.1 placement -----------------------------------------------


@pytest.mark.parametrize("pe_offers", [None, 4, 1])
def test_tie_break_prefers_an_active_vm_then_the_most_recently_idle(
    pe_offers: int | None,
) -> None:
    large = CATALOG[1]
    # no faster Extra-large to tempt the user
    p = Provider([CLUSTERS["standard"]], (large,), pe_offers=pe_offers)
    a = p.start_vm(large, 0.0)
    b = p.start_vm(large, 0.0)
    c = p.start_vm(large, 0.0)
    # b idle since 1 (ready), c idle since 50 (a short task), a active until 10,001
    p.assign(task(3e5), Allocation(0, 0, ACTIVE, c.id, 0, (0, 0, 0, 0)), 0.0)  # ends 51
    p.assign(task(6e7), Allocation(0, 0, ACTIVE, a.id, 0, (0, 0, 0, 0)), 0.0)
    p.complete(c.id, 0)
    t = task(6e5)
    kinds = {(x.kind, x.vm) for x in p.allocations(t, 100.0) if x.time == pytest.approx(100.0)}
    if pe_offers is None:
        assert {(ACTIVE, a.id), (IDLE, b.id), (IDLE, c.id)} <= kinds
    else:  # the most recently idle VM only
        assert {(ACTIVE, a.id), (IDLE, c.id)} <= kinds and (IDLE, b.id) not in kinds
    placed = p.run_task(t, Offer(100.0, 1e12, 0), 100.0, U)
    assert placed is not None and placed.vm == a.id and placed.pe == 1  # active VM, free PE
    # Fill a's PEs: now among idle VMs the one idle for the shortest time (c) wins.
    p.run_task(task(6e5), Offer(100.0, 1e12, 0), 100.0, U)
    p.run_task(task(6e5), Offer(100.0, 1e12, 0), 100.0, U)
    placed = p.run_task(task(6e5), Offer(100.0, 1e12, 0), 100.0, U)
    assert placed is not None and placed.vm == c.id
    placed = p.run_task(task(6e5), Offer(101.0, 1e12, 0), 100.0, U)
    assert placed is not None and placed.vm == c.id  # c is now active: before idle b


def test_offer_no_longer_possible_is_refused() -> None:
    p = provider()
    offer = p.offers(task(), 0.0, 0)[0]
    p.prices.prices["cpu"] *= 2  # prices rose since the offer
    assert p.run_task(task(), offer, 0.0, U) is None
    p.prices.prices["cpu"] /= 2
    assert p.run_task(task(), offer, 0.0, U) is not None


def test_placement_on_the_host_running_most_vms() -> None:
    p = provider("small")
    normal = CATALOG[0]
    hosts = [p.start_vm(normal, 0.0).host for _ in range(4)]
    assert hosts == [0, 0, 0, 0]  # 2 CPUs x 2 PEs of 6,000 MIPS on 12,000-MIPS CPUs
    assert p.start_vm(normal, 0.0).host == 1
    assert p.hosts[0].cpu_free == [0.0, 0.0]
    # host 1 has 1 VM, host 0 has 4: after freeing three on host 0, host 1 (1) ties host 0
    # (1): lowest index wins
    for vm in [v for v in p.vms.values() if v.host == 0][:3]:
        vm.last = -1000.0
    p.stop_idle(0.0, 600.0)
    assert [h.vms for h in p.hosts[:2]] == [1, 1]
    assert p.start_vm(normal, 0.0).host == 0


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["small", "standard", "powerful"]))
def test_capacity_never_exceeded(seed: int, cluster: str) -> None:
    rng = random.Random(seed)
    p = provider(cluster)
    spec = CLUSTERS[cluster].host
    now = 0.0
    running: list[tuple[float, int, int]] = []
    for k in range(60):
        now += rng.uniform(0, 60)
        running.sort()
        while running and running[0][0] <= now:
            _, vm_id, pe_id = running.pop(0)
            p.complete(vm_id, pe_id)
        p.stop_idle(now, 600.0)
        t = task(rng.expovariate(1e-6), rng.choice([10, 50]), rng.choice([10, 100]), tid=k)
        allocs = p.allocations(t, now)
        if allocs:
            placed = p.assign(t, rng.choice(allocs), now)
            running.append((placed.end, placed.vm, placed.pe))
        for h in p.hosts:
            assert all(-1e-6 <= a <= spec.speed + 1e-6 for a in h.cpu_free)
            assert -1e-6 <= h.memory_free <= spec.memory + 1e-6
            assert all(-1e-6 <= a <= spec.disk + 1e-6 for a in h.disk_free)
            on = [v for v in p.vms.values() if v.host == h.index]
            assert h.vms == len(on)
            assert h.memory_free == pytest.approx(spec.memory - sum(v.type.memory for v in on))
        for vm in p.vms.values():  # a VM never holds more running tasks' memory than it has
            for pe in range(vm.type.pes):
                fm, fd = vm.free_at(pe, now)
                assert fm >= -1e-6 and fd >= -1e-6


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(["small", "standard"]), st.integers(1, 4))
def test_pruned_offers_contain_the_best_allocation(seed: int, cluster: str, k: int) -> None:
    """The TAM's per-type pruning (the K earliest PEs, the most recently idle VM) keeps an
    allocation as good as the exhaustive list's best, of the same kind."""
    rng = random.Random(seed)
    full, pruned = provider(cluster, None), provider(cluster, k)
    now = 0.0
    running: list[tuple[float, int, int]] = []
    for n in range(50):
        now += rng.uniform(0, 40)
        running.sort()
        while running and running[0][0] <= now:
            _, vm_id, pe_id = running.pop(0)
            full.complete(vm_id, pe_id)
            pruned.complete(vm_id, pe_id)
        t = task(rng.expovariate(1e-6), 10, rng.choice([10, 100]), tid=n)
        a_full, a_pruned = full.allocations(t, now), pruned.allocations(t, now)
        assert {(a.kind, a.vm, a.pe) for a in a_pruned} <= {(a.kind, a.vm, a.pe) for a in a_full}

        def best(allocs: list[Allocation]) -> Allocation:
            return min(allocs, key=lambda x: (-U(x.cost, x.time), x.tie))

        bf, bp = best(a_full), best(a_pruned)
        assert (bp.time, bp.cost, bp.kind) == pytest.approx((bf.time, bf.cost, bf.kind))
        placed = full.assign(t, bf, now)
        pruned.assign(t, bf, now)
        running.append((placed.end, placed.vm, placed.pe))


# --- the DIET hierarchy --------------------------------------------------------------------


def test_hierarchy_shape_and_pruning() -> None:
    tree = diet.build(5, (2, 3))
    names = [n.name for n in tree.nodes]
    assert names[0] == "MA" and sum(n.startswith("SeD") for n in names) == 5
    assert sorted(tree.nodes[s].sed or 0 for s in tree.seds()) == [0, 1, 2, 3, 4]
    las = [n for n in tree.nodes if n.name.startswith("LA")]
    assert len(las) == 5 and all(len(n.children) == 1 for n in las)  # 6th LA pruned
    assert {tree.depth(s) for s in tree.seds()} == {3}
    with pytest.raises(ValueError):
        diet.build(0)
    with pytest.raises(ValueError):
        diet.build(2, (0,))


def test_gather_merges_each_child_once() -> None:
    g = diet.Gather((3, 4))
    assert not g.add(3, [Offer(1, 1, 0)])
    with pytest.raises(ValueError):
        g.add(3, [Offer(1, 1, 0)])
    with pytest.raises(ValueError):
        g.add(9, [])
    assert g.add(4, [Offer(2, 2, 1), Offer(3, 3, 1)])
    assert g.offers == [Offer(1, 1, 0), Offer(2, 2, 1), Offer(3, 3, 1)]


class _Spy(Simulation):
    seen: list[tuple[float, list[Offer]]]

    def on_offers(self, now: float, task: Task, offers: list[Offer]) -> None:
        self.__dict__.setdefault("seen", []).append((now, list(offers)))
        super().on_offers(now, task, offers)


@pytest.mark.parametrize("fanout", [(1,), (2,), (2, 2), (3, 1)])
def test_offers_reach_the_user_from_every_sed_exactly_once(fanout: tuple[int, ...]) -> None:
    cfg = Config(providers=(("small",), ("standard",), ("small",)),
                 groups=(Group(1, 1),), fanout=fanout)
    sim = _Spy(cfg)
    sim.run()
    ((now, offers),) = sim.seen
    expected: list[Offer] = []
    for k, prov in enumerate(Provider([CLUSTERS[c] for c in p], CATALOG)
                             for p in cfg.providers):
        expected += prov.offers(sim.users[0].tasks[0], 0.0, k)
    assert sorted(offers, key=lambda o: (o.sed, o.time)) == sorted(
        expected, key=lambda o: (o.sed, o.time))
    hops = 2 * (sim.tree.depth(sim.tree.seds()[0]) + 1)
    assert now == pytest.approx(sim.users[0].tasks[0].created + hops * cfg.delay)


# --- users ---------------------------------------------------------------------------------


def test_priorities() -> None:
    t = task(1e6, importance=10.0, deadline=1000.0)
    assert by_importance(t, 0.0) == 10.0
    assert by_risk(t, 500.0) == pytest.approx(1e6 / 500 * 10)
    assert by_risk(t, 1000.0) == float("inf")


def test_task_generation_follows_the_paper_sets_and_is_seeded() -> None:
    a = generate_tasks(3, 2000, Load(), seed=7)
    assert a == generate_tasks(3, 2000, Load(), seed=7)
    assert a != generate_tasks(3, 2000, Load(), seed=8)
    assert {t.memory for t in a} == {10, 20, 30, 40, 50}
    assert {t.disk for t in a} == {10, 20, 30, 50, 60, 100}
    assert {round((t.deadline - t.created) / t.cpu, 6) for t in a} == {0.001, 0.01, 0.1, 10, 100}
    assert 0.15 < sum(t.high for t in a) / len(a) < 0.25
    gaps = [b.created - x.created for x, b in itertools.pairwise(a)]
    assert sum(gaps) / len(gaps) == pytest.approx(30, rel=0.1)
    assert all(t.importance >= 0 for t in a)


def test_load_changes_the_mean_interarrival() -> None:
    load = Load((0.0, 10_000.0), (100.0, 1.0))
    ts = generate_tasks(0, 3000, load, seed=1)
    late = [t for t in ts if t.created > 10_100]
    gaps = [b.created - a.created for a, b in itertools.pairwise(late)]
    assert sum(gaps) / len(gaps) == pytest.approx(1.0, rel=0.15)


def test_retry_drops_expired_tasks_and_asks_for_the_highest_priority() -> None:
    sim = Simulation(Config(groups=(Group(1, 0),), strategy=Strategy(priority="risk")))
    user = sim.users[0]
    expired = task(tid=1, deadline=50.0, importance=1000.0)
    low = task(1e6, tid=2, deadline=10_000.0, importance=1.0)
    urgent = task(1e6, tid=3, deadline=200.0, importance=1.0)
    user.queue = StoredTasks([expired, low, urgent])
    sim.reason[1] = "failed_budget"
    sim.total = 3
    sim.retry(100.0, user)
    assert user.counts["failed_budget"] == 1  # expired, counted under its last reason
    assert [t.id for t in user.queue] == [2]
    assert sim.events[0][3] == (sim.tree.root, urgent)  # REQUEST_FOR_OFFERS for task 3
    sim2 = Simulation(Config(groups=(Group(1, 0),), strategy=Strategy(priority="importance")))
    sim2.users[0].queue = StoredTasks([urgent, task(tid=4, deadline=9e9, importance=5.0)])
    sim2.retry(100.0, sim2.users[0])
    assert sim2.events[0][3][1].id == 4


def test_without_retry_a_task_without_fitting_offer_fails_at_once() -> None:
    cfg = Config(groups=(Group(2, 30),), budget=1.0, strategy=Strategy(retry=False))
    r = simulate(cfg)
    assert r["failed_budget"] == 60 and r["succeeded"] == 0 and r["requests"] == 60


# --- whole runs: money, determinism --------------------------------------------------------


@settings(max_examples=8, deadline=None)
@given(st.integers(0, 1000), st.booleans(), st.booleans(), st.sampled_from(["risk", "importance"]),
       st.sampled_from([1e7, 1e9]))
def test_money_is_conserved_with_the_virtual_bank(
    seed: int, retry: bool, alternatives: bool, priority: str, budget: float
) -> None:
    cfg = Config(groups=(Group(3, 25, Load((0.0,), (20.0,))),), seed=seed, budget=budget,
                 strategy=Strategy(retry, alternatives, priority), bank_period=200.0)
    r = simulate(cfg)
    bank = r["bank"]
    assert bank["audit_ok"] and bank["burned"] == 0
    assert bank["minted"] == bank["sum_of_balances"] == 3 * int(budget * 1_000_000)
    assert r["succeeded"] + r["failed_budget"] + r["failed_deadline"] + r["failed_offer"] == 75
    if r["end_time"] > 200 and r["succeeded"]:
        assert bank["redistributions"] >= 1


def test_same_seed_same_result() -> None:
    cfg = Config(groups=(Group(4, 40),), seed=3)
    a, b = simulate(cfg), simulate(cfg)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert json.dumps(simulate(Config(groups=(Group(4, 40),), seed=4))) != json.dumps(a)


def test_bad_config_is_refused() -> None:
    with pytest.raises(ValueError, match="cluster"):
        Config(providers=(("huge",),))
    with pytest.raises(ValueError, match="priority"):
        Strategy(priority="luck")
    with pytest.raises(ValueError, match="budget"):
        Config(budget=-1.0)


@given(st.lists(st.tuples(st.floats(1.0, 1e7), st.floats(0.0, 200.0), st.floats(0.0, 2e4)),
                min_size=1, max_size=40),
       st.floats(0.0, 2e4), st.sampled_from(sorted(PRIORITIES)))
def test_stored_tasks_expire_and_pick_as_the_scalar_priorities_do(
    specs: list[tuple[float, float, float]], now: float, priority: str
) -> None:
    """The packed-array queue drops the same tasks, in the same order, and picks the same
    task as a scan with :data:`PRIORITIES` (the first of the highest priority)."""
    tasks = [task(c, tid=i, deadline=d, importance=imp) for i, (c, imp, d) in enumerate(specs)]
    q = StoredTasks(tasks)
    gone = q.expire(now)
    assert [t.id for t in gone] == [t.id for t in tasks if t.deadline <= now]
    kept = [t for t in tasks if t.deadline > now]
    assert [t.id for t in q] == [t.id for t in kept]
    if kept:
        f = PRIORITIES[priority]
        want = max(range(len(kept)), key=lambda i: f(kept[i], now))
        assert q.best(priority, now) == want
        assert q.pop(want).id == kept[want].id and len(q) == len(kept) - 1
