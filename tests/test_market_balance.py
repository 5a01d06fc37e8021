"""The tabu search's shortcuts (merkat.market.balance_fast) against its general path
(balance_state.FAST_PATHS off): the same clearing, byte for byte, on random markets shaped
like the runs' (one-core VMs of a few applications on one-core hosts, crowded nodes) and
unlike them (capped VMs, memory bids, minimums, nodes of many cores, near-overflow bids),
with Merkat's moves and Themis Fig. 2's (which share the moves' clearings)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.market import BalanceParams, Hosts, VMs, balance_fast, balance_state, clear
from merkat.market.types import NO_HOST

balance = importlib.import_module("merkat.market.balance")  # (the package exports a function)


def _market(seed: int) -> tuple[Hosts, VMs, BalanceParams]:
    rng = np.random.default_rng(seed)
    kind = seed % 6
    n_hosts = int(rng.integers(2, 40))
    n_apps = int(rng.integers(1, 12))
    sizes = rng.integers(1, 9, n_apps)
    n = int(sizes.sum()) * int(rng.integers(1, 4))
    app = rng.integers(0, n_apps, n)
    app_bid = rng.choice([0.001, 0.05, 0.15, 0.4, 1.0, 2.5], n_apps)
    cores = np.ones(n_hosts)
    cap = np.ones(n)
    bid = np.zeros((n, 2))
    bid[:, 0] = app_bid[app]
    minimum = np.zeros((n, 2))
    if kind == 1:  # heterogeneous hosts and caps: some VMs capped
        cores = rng.choice([1.0, 3.0, 4.0, 7.0, 16.0], n_hosts)
        cap = rng.choice([0.5, 1.0, 2.0, 8.0, np.inf], n)
        bid[:, 0] *= rng.uniform(0.5, 2.0, n_apps)[app]
    elif kind == 2:  # memory traded too: two resources make errors
        bid[:, 1] = rng.choice([0.0, 0.01, 0.1], n)
    elif kind == 3:  # memory minimums
        minimum[:, 1] = rng.choice([0.0, 512.0, 2048.0], n)
    elif kind == 4:  # crowded: many VMs per node (segmented candidate clearings)
        n_hosts = int(rng.integers(2, 6))
        cores = np.full(n_hosts, 64.0)
        extra = int(rng.integers(60, 250))
        app = np.concatenate((app, rng.integers(0, n_apps, extra)))
        n = app.size
        cap = np.ones(n)
        bid = np.zeros((n, 2))
        bid[:, 0] = app_bid[app]
        minimum = np.zeros((n, 2))
    elif kind == 5 and seed % 4 == 1:  # bids near overflow: the running sums are not safe
        bid[:, 0] *= 1e306
    host = rng.integers(0, n_hosts, n)
    host[rng.random(n) < 0.15] = NO_HOST
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)),
                  np.column_stack([cores, np.full(n_hosts, 8192.0)]))
    vms = VMs(tuple(f"v{i}" for i in range(n)), bid, np.column_stack([cap, np.full(n, 4096.0)]),
              host, minimum)
    params = BalanceParams(max_migrations=int(rng.integers(0, 30)),
                           error_threshold=float(rng.choice([0.0, 0.05, 0.1])),
                           candidates=int(rng.choice([1, 3, 8])),
                           rule="themis" if seed % 5 == 4 else "merkat")
    return hosts, vms, params


def _bytes(c: object) -> list[bytes]:
    out = [np.ascontiguousarray(getattr(c, k)).tobytes()
           for k in ("price", "ideal", "allocation", "host", "error", "node_price")]
    b = c.balance  # type: ignore[attr-defined]
    out.append(repr((c.migrations, b.iterations, b.rms_before, b.rms_after,  # type: ignore[attr-defined]
                     b.ran)).encode())
    return out


def test_the_shortcuts_give_the_general_paths_clearing_byte_for_byte(
        monkeypatch: pytest.MonkeyPatch) -> None:
    taken: dict[str, int] = {"pair_shares": 0, "searches": 0, "usual_moves": 0}
    real = balance_fast.Shortcuts.pair_shares

    def spy(self: object, *a: object) -> object:
        got = real(self, *a)  # type: ignore[arg-type]
        taken["pair_shares"] += got is not None
        return got

    monkeypatch.setattr(balance_fast.Shortcuts, "pair_shares", spy)
    usual = balance.usual_loop

    def counted(search: object, params: BalanceParams, rms0: float) -> object:
        got = usual(search, params, rms0)
        taken["usual_moves"] += got[0]
        return got

    monkeypatch.setattr(balance, "usual_loop", counted)
    for name in ("_exact", "_pair_general"):  # (the usual loop's steps the shortcuts leave)
        taken[name] = 0
        real_step = getattr(balance_state.Search, name)

        def step(self: object, *a: object, _real: object = real_step, _name: str = name
                 ) -> object:
            taken[_name] += 1
            return _real(self, *a)  # type: ignore[operator]

        monkeypatch.setattr(balance_state.Search, name, step)
    for seed in range(240):
        hosts, vms, params = _market(seed)
        monkeypatch.setattr(balance_state, "FAST_PATHS", False)
        want = clear(hosts, vms, params=params)
        monkeypatch.setattr(balance_state, "FAST_PATHS", True)
        got = clear(hosts, vms, params=params)
        assert _bytes(got) == _bytes(want), seed
        taken["searches"] += got.balance.ran
    # the usual market's loop (balance_loop) made most of the moves; the pair's shortcut
    # answered the other searches' moves (two resources traded, minimums, Themis's rule)
    assert taken["searches"] > 150
    assert taken["usual_moves"] > 1000
    assert taken["pair_shares"] > 300
    # the general path's steps, their node lists built from the members (balance_loop.lists)
    assert taken["_exact"] > 100 and taken["_pair_general"] > 300


def test_the_usual_loops_kept_estimates_are_the_fresh_ones() -> None:
    """After :func:`~merkat.market.balance_loop.usual_loop` (which updates a kept estimate
    array inline when its class is next asked, each node moved since once), every kept
    array equals the one computed from the nodes' current terms (the general path's numpy
    expression), bit for bit, on every node not moved since it was last brought up to
    date; the usual market's terms kept as Python floats equal the search's arrays. On
    one-core markets and on hosts of several cores with capped VMs."""
    from merkat.market.balance_loop import usual_loop
    from merkat.market.clear import ideal_allocation
    from merkat.market.placement import worst_fit_decreasing

    checked = nodes = moves = 0
    for seed in range(60):
        hosts, vms, _ = _market(seed)
        if len(hosts) < 2:
            continue
        ideal, _ = ideal_allocation(hosts, vms)
        s = balance_state.Search(hosts, vms, worst_fit_decreasing(hosts, vms), ideal,
                                 BalanceParams(max_migrations=40, error_threshold=0.0))
        s.prepare()
        if s.fast is None or not s.fast.simple:
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            it, _, _ = usual_loop(s, s.params, s.rms())
        moves += it
        assert s.host.tolist() == s.host_l.tolist(), seed
        log = s.fast.log
        for (b, c, i), (e, at) in s.fast.kept.items():
            with np.errstate(divide="ignore", invalid="ignore"):
                est = np.minimum(c, b * s.cl[:, 0] / (s.bu[:, 0] + b))
                fresh = np.where(est > 0, np.abs(1.0 - i / est), 1e3)
            same = np.ones(len(hosts), dtype=bool)
            same[log[at:]] = False
            assert e[same].tobytes() == fresh[same].tobytes(), seed
            checked += 1
            nodes += int(same.sum())
        assert s.fast.bu_l == s.bu[:, 0].tolist() and s.fast.cl_l == s.cl[:, 0].tolist()
    assert checked > 50 and nodes > 1000 and moves > 200


def test_stable_order_is_numpys_stable_argsort() -> None:
    """The int16 radix sort's permutation is the 64-bit merge sort's (ties in index order),
    below and above the 16-bit bound."""
    rng = np.random.default_rng(3)
    for n, bound in ((0, 5), (1, 1), (900, 240), (300, 2), (2000, 32767), (500, 40000)):
        keys = rng.integers(0, bound, n).astype(np.int64)
        want = np.argsort(keys, kind="stable")
        got = balance_state.stable_order(keys, bound)
        assert got.tolist() == want.tolist(), (n, bound)


def test_a_view_reads_and_writes_what_tolist_holds() -> None:
    """The search's per-VM columns are memoryviews (``balance_state.view``): every element
    read is ``tolist()``'s (the same bits: zeros of both signs, subnormals, inf, NaN; a
    strided column; int64 host indices), and a write reaches the array."""
    rng = np.random.default_rng(5)
    bid = rng.uniform(0, 3, (50, 2))
    bid[:6, 0] = [0.0, -0.0, 5e-324, np.inf, np.nan, 1e308]
    for col in (bid[:, 0], bid[:, 1], np.ascontiguousarray(bid[:, 0])):
        v = balance_state.view(col)
        want = col.tolist()
        got = [v[j] for j in range(len(col))]
        assert [type(x) for x in got] == [float] * len(col)
        assert np.array(got).tobytes() == np.array(want).tobytes()
    host = rng.integers(-1, 240, 50).astype(np.int64)
    hv = balance_state.view(host)
    assert [hv[j] for j in range(50)] == host.tolist()
    assert all(type(hv[j]) is int for j in range(50))
    hv[7] = 239
    assert host[7] == 239


_BIDS = (0.001, 0.05, 0.15, 0.4, 1.0, 2.5)


def _clearings_both_ways(hosts: Hosts, vms: VMs, params: BalanceParams) -> tuple[object, object]:
    old = balance_state.FAST_PATHS
    try:
        balance_state.FAST_PATHS = False
        want = clear(hosts, vms, params=params)
        balance_state.FAST_PATHS = True
        got = clear(hosts, vms, params=params)
    finally:
        balance_state.FAST_PATHS = old
    return want, got


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_periods_of_small_changes_clear_byte_for_byte(data: st.DataObject) -> None:
    """A run's periods in small: a market of one-core VMs of a few applications, then a
    sequence of small changes (an application's bid, a VM moved by hand, a VM added, a VM
    ended), each period starting from the last clearing's mapping; the shortcuts (the usual
    loop) and the general path give the same clearing byte for byte every period. Empty
    nodes and nodes holding the same VMs of one application share their terms, so a move's
    candidates repeat terms (the usual loop answers each terms once)."""
    n_hosts = data.draw(st.integers(2, 30), "hosts")
    cores = data.draw(st.sampled_from([1.0, 1.0, 2.0, 4.0]), "cores")
    n_apps = data.draw(st.integers(1, 6), "apps")
    app_bid = data.draw(st.lists(st.sampled_from(_BIDS), min_size=n_apps, max_size=n_apps))
    cap_of = data.draw(st.lists(st.sampled_from([1.0, 1.0, 0.5, np.inf]), min_size=n_apps,
                                max_size=n_apps))
    app = data.draw(st.lists(st.integers(0, n_apps - 1), min_size=1, max_size=90), "vms")
    host = data.draw(st.lists(st.integers(NO_HOST, n_hosts - 1), min_size=len(app),
                              max_size=len(app)), "start")
    params = BalanceParams(max_migrations=data.draw(st.integers(0, 25)),
                           error_threshold=data.draw(st.sampled_from([0.0, 0.05, 0.1])),
                           candidates=data.draw(st.sampled_from([1, 3, 8])),
                           tabu_size=data.draw(st.integers(0, 20)))
    changes = data.draw(st.lists(st.tuples(st.sampled_from(["bid", "move", "add", "end"]),
                                           st.integers(0, 10**6), st.sampled_from(_BIDS)),
                                 max_size=6), "changes")
    hosts = Hosts(tuple(f"h{i}" for i in range(n_hosts)),
                  np.column_stack([np.full(n_hosts, cores), np.full(n_hosts, 8192.0)]))
    for step in [None, *changes]:
        if step is not None:
            kind, k, b = step
            if kind == "bid":
                app_bid[k % n_apps] = b
            elif kind == "move":
                host[k % len(app)] = k % n_hosts
            elif kind == "add":
                app.append(k % n_apps)
                host.append(NO_HOST)
            elif len(app) > 1:
                del app[k % len(app)], host[k % len(app)]
        n = len(app)
        bid = np.zeros((n, 2))
        bid[:, 0] = [app_bid[a] for a in app]
        cap = np.column_stack([[cap_of[a] for a in app], np.full(n, 4096.0)])
        vms = VMs(tuple(f"v{i}" for i in range(n)), bid, cap, np.array(host, dtype=np.int64))
        want, got = _clearings_both_ways(hosts, vms, params)
        assert _bytes(got) == _bytes(want), step
        host = got.host.tolist()  # type: ignore[attr-defined]
