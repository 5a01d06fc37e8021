"""The running VMs' rows an admission point reads (merkat.core.running): the cache that keeps
each application's rows between admission points (``RunningRows``) gives, bit for bit, what
reading every record again gives (``running``), at every admission point of a run with
migrations, suspensions and rebids, and after each kind of write into the records."""

from __future__ import annotations

import numpy as np
import pytest

from merkat.control.registry import make_policy
from merkat.control.types import AppStatus, VMState
from merkat.core import admission_keep
from merkat.core import running as running_mod
from merkat.core.model import App, AppSpec, VMRecord
from merkat.core.period import Platform
from merkat.core.running import Running, RunningRows, running
from merkat.market import NO_HOST, Hosts
from test_market_support import random_run


def _same(a: Running, b: Running) -> None:
    """``a`` and ``b`` hold the same rows, bit for bit."""
    assert [(app, rows) for app, _, rows in a.apps] == [(app, rows) for app, _, rows in b.apps]
    assert all(x is y for (x, _, _), (y, _, _) in zip(a.apps, b.apps, strict=True))
    assert a.vms[0] == b.vms[0] and a.ends == b.ends
    for x, y in zip((*a.vms[1:], a.current, a.traded, a.odd),
                    (*b.vms[1:], b.current, b.traded, b.odd), strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


@pytest.mark.parametrize("seed", range(3))
def test_every_admission_point_of_a_run_reads_the_rows_a_fresh_read_gives(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """40 random applications arriving over five 60 s periods on six 2-core hosts, admission
    every 10 s: the platform's cache against a fresh read at every admission point with
    newcomers (after the periods' commits, rebids and migrations and the admissions'
    settles), and it does keep rows (many applications' records did not change since the
    last point)."""
    calls = apps_read = built = 0
    cached = RunningRows.__call__
    build = running_mod._Batch.add

    def counting(self, *a):  # type: ignore[no-untyped-def]
        nonlocal built
        built += 1
        return build(self, *a)

    def checking(self, apps, const_of):  # type: ignore[no-untyped-def]
        nonlocal calls, apps_read
        apps = list(apps)
        monkeypatch.setattr(running_mod._Batch, "add", counting)
        out = cached(self, apps, const_of)
        monkeypatch.setattr(running_mod._Batch, "add", build)
        _same(out, running(apps, const_of))  # a fresh read of the records
        _same(out, cached(RunningRows(), apps, const_of))  # a fresh read of the columns
        calls += 1
        apps_read += len(apps)
        return out

    monkeypatch.setattr(RunningRows, "__call__", checking)
    # every point reads the rows (the kept state's path reads none: tests/test_admission.py)
    monkeypatch.setattr(admission_keep, "FAST", False)
    platform = random_run(seed, apps=40, over=5, periods=8, work=400.0,
                          best_effort=lambda k, rng: bool(rng.random() < 0.3))
    records = platform.records
    assert sum(r.migrations for r in records) > 0
    assert calls > 10 and built < apps_read, (calls, built, apps_read)


def _platform() -> tuple[Platform, list[App]]:
    """Three applications on four hosts: one trading the CPU with a shared bid, one trading
    memory and CPU with a bid per VM, one with a suspended and an unplaced VM."""
    platform = Platform(Hosts(tuple(f"h{k}" for k in range(4)), np.array([[2.0, 4096.0]] * 4)))
    apps = []
    for a, trade in enumerate((("cpu",), ("memory", "cpu"), ("cpu",))):
        spec = AppSpec(f"a{a}", "best-effort", 1, {"cpu": 1.0, "memory": 512.0}, 0.0, 100.0,
                       trade=trade)
        app = App(spec, make_policy("best-effort"), f"app:a{a}", status=AppStatus.RUNNING)
        shared = dict.fromkeys(trade, 0.5 + a)
        for v in range(3):
            bid = shared if a != 1 else {r: 0.25 * (v + 1) for r in trade}
            app.vms.append(VMRecord(f"a{a}/vm{v}", spec.id, VMState.RUNNING, host=(a + v) % 4,
                                    bid=bid, alloc=dict.fromkeys(trade, 0.5), new=False))
        apps.append(app)
    apps[2].vms[1].state = VMState.SUSPENDED
    apps[2].vms[2].host, apps[2].vms[2].new = NO_HOST, True
    return platform, apps


def _write_host(app: App) -> None:
    app.vms[0].host = (app.vms[0].host + 1) % 4  # in place (the live service's follow_moves)


def _write_alloc(app: App) -> None:
    app.vms[1].alloc = {**app.vms[1].alloc, "cpu": 0.125}  # replaced (a short resize)


def _write_bid(app: App) -> None:
    app.vms[0].bid = {r: 2.0 for r in app.vms[0].bid}  # a period's commit


def _write_state(app: App) -> None:
    app.vms[0].state = VMState.SUSPENDED  # in place


def _write_resume(app: App) -> None:
    app.vms[1].state = VMState.RUNNING  # (a2's suspended VM, or a running one: no change)


def _write_vms(app: App) -> None:
    app.vms = [*app.vms, VMRecord(f"{app.spec.id}/vm9", app.spec.id, VMState.BOOTING, host=3,
                                  bid=app.vms[0].bid, alloc={}, new=False)]


def _write_less_alloc(app: App) -> None:
    app.vms[0].alloc = {}  # not of its application's shape: odd


@pytest.mark.parametrize("write", [_write_host, _write_alloc, _write_bid, _write_state,
                                   _write_resume, _write_vms, _write_less_alloc])
@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_write_into_the_records_is_read_again_and_only_that_application(
        write, which: int) -> None:  # type: ignore[no-untyped-def]
    platform, apps = _platform()
    const = platform.decider.const
    cache = RunningRows()
    first = cache(apps, const)
    _same(first, running(apps, const))
    chunks = {a: cache._chunks[a][2] for a in cache._chunks}
    write(apps[which])
    second = cache(apps, const)
    _same(second, running(apps, const))
    for a, (_, _, chunk, _) in cache._chunks.items():  # the others' rows are the ones kept
        if a != apps[which].spec.id:
            assert chunk is chunks[a]
    changed = [a for a in chunks if cache._chunks[a][2] is not chunks[a]]
    assert changed in ([apps[which].spec.id], [])
    if write is not _write_resume or which == 2:
        assert changed == [apps[which].spec.id]


def test_an_application_not_read_is_forgotten_and_a_new_record_is_read() -> None:
    platform, apps = _platform()
    const = platform.decider.const
    cache = RunningRows()
    cache(apps, const)
    cache(apps[:2], const)
    assert set(cache._chunks) == {"a0", "a1"}
    # the same id, another record (an application submitted again after a restart)
    again = App(apps[0].spec, apps[0].controller, apps[0].account, status=AppStatus.RUNNING,
                vms=[VMRecord("a0/vm0", "a0", VMState.RUNNING, host=3, bid={"cpu": 9.0},
                              alloc={"cpu": 1.0}, new=False)])
    _same(cache([again, *apps[1:]], const), running([again, *apps[1:]], const))


@pytest.mark.parametrize("seed", range(4))
def test_rows_kept_joined_follow_any_order_subset_and_write(seed: int) -> None:
    """The rows kept joined (``RunningRows._kept``, by spans): calls with the applications
    in random orders and subsets (an application leaving in the middle, coming back ahead of
    the others), with writes between some calls, each against a fresh read; the rows of a
    call are never changed by the next; a call with the same applications and nothing
    written gives the last arrays again (no copy)."""
    rng = np.random.default_rng(seed)
    platform, apps = _platform()
    const = platform.decider.const
    cache = RunningRows()
    writes = [_write_host, _write_alloc, _write_bid, _write_state, _write_resume, _write_vms,
              _write_less_alloc]
    given: list[tuple[Running, Running]] = []
    for _ in range(30):
        if rng.random() < 0.3:
            writes[int(rng.integers(len(writes)))](apps[int(rng.integers(3))])
        chosen = [apps[k] for k in rng.permutation(3)[: int(rng.integers(0, 4))]]
        out = cache(chosen, const)
        _same(out, running(chosen, const))
        given.append((out, running(chosen, const)))
        again = cache(chosen, const)
        _same(again, out)
        assert again.vms[1].base is out.vms[1].base or again.vms[1] is out.vms[1] or not chosen
    for out, fresh in given:  # (what a call gave is never written by a later one)
        _same(out, fresh)
