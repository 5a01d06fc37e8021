"""A trace run's memory follows its active applications, not the jobs it ran: ended
applications are summarised and forgotten (merkat.worlds.merkat.trace, Driver.forget), period
records are kept as columns (merkat.core.period_log), the bank keeps a window of idempotency
keys (MemoryLedger's ``remember``)."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest

from merkat.backends.sim import RigidApp, SimBackend
from merkat.bank.errors import IdempotencyConflict
from merkat.bank.ledger import AccountKind
from merkat.bank.memory import MemoryLedger
from merkat.core.backend import Plan, VMPlacement
from merkat.core.model import PeriodRecord
from merkat.core.period import AppSpec, Platform
from merkat.core.period_log import PeriodLog, max_allocated
from merkat.market import Hosts
from merkat.runtime.driver import Driver
from merkat.workload.cluster import Cluster
from merkat.workload.jobs import Workload
from merkat.worlds.merkat import trace
from merkat.worlds.merkat.options import MarketConfig


def _record(i: int, rng: np.random.Generator, **changes: Any) -> PeriodRecord:
    f = [float(x) for x in rng.normal(size=6)]
    values: dict[str, Any] = dict(
        index=i, time=300.0 * i, prices={"cpu": f[0], "memory": f[1]},
        allocated={"cpu": f[2], "memory": f[3]}, capacity={"cpu": 240.0, "memory": f[4]},
        running_apps=int(rng.integers(0, 50)), waiting_apps=3, suspended_apps=0, vms=17,
        created=1, destroyed=2, migrations=int(rng.integers(0, 30)), suspended=0, resumed=0,
        charged=int(rng.integers(0, 10**12)),
    )
    values.update(changes)
    return PeriodRecord(**values)


def test_the_period_log_gives_back_every_record_bit_for_bit() -> None:
    rng = np.random.default_rng(0)
    records = [_record(i, rng) for i in range(50)]
    records[3] = _record(3, rng, prices={"cpu": -0.0, "memory": math.nan},
                         refused=("7: stop refused while ended",), unpaid=("9",))
    records[4] = _record(4, rng, charged=2**40, minted=2**70)  # wider than int32, int64
    records[5] = _record(5, rng, prices={"cpu": 1.0})  # other keys: kept whole
    records[6] = _record(6, rng, running_apps=True)  # not an int: kept whole
    records[7] = _record(7, rng, capacity={"cpu": 240, "memory": 1.0})  # an int: kept whole
    log = PeriodLog(records)
    assert len(log) == 50
    for a, b in zip(log, records, strict=True):
        assert repr(a) == repr(b)  # (NaN != NaN: compare the text, then the bits)
    got = log[3].prices
    assert math.copysign(1.0, got["cpu"]) == -1.0 and math.isnan(got["memory"])
    assert log[3].refused == ("7: stop refused while ended",) and log[3].failed == ()
    assert log[4].minted == 2**70 and type(log[6].running_apps) is bool
    assert log[-1] == records[-1] and log[10:13] == records[10:13]
    with pytest.raises(IndexError):
        log[50]
    clean = PeriodLog(records[8:])
    assert clean == records[8:] and clean != records[9:]
    assert pickle.loads(pickle.dumps(clean)) == records[8:]
    assert clean.column("allocated", "cpu") == [r.allocated["cpu"] for r in records[8:]]
    assert clean.column("migrations") == [r.migrations for r in records[8:]]
    assert max_allocated(clean) == max(r.allocated["cpu"] for r in records[8:])
    both = PeriodLog.concat([(clean, 40), (log, 45)])
    assert [r.index for r in both] == list(range(7))
    assert [r.time for r in both] == [r.time for r in records[48:] + records[45:]]


def _spec(i: int) -> AppSpec:
    return AppSpec(id=f"a{i}", policy="deadline-strict", size=1, vm_size={"cpu": 1.0},
                   submit_time=0.0, budget=100.0, deadline=1e6)


def test_forgetting_refuses_what_is_still_running() -> None:
    platform = Platform(Hosts(("h0",), np.array([[1.0, 1024.0]])))
    platform.submit(_spec(0))
    with pytest.raises(ValueError, match=r"a0.*active"):
        platform.forget(["a0"])
    backend = SimBackend()
    backend.add_app("a0", RigidApp(vms=1, work_total=10.0, cpu=1.0, memory=0.0))
    backend.apply(Plan(0.0, 300.0, create=(VMPlacement("a0-0", "a0", 0),)))
    with pytest.raises(ValueError, match=r"a0.*VMs"):
        backend.forget(["a0"])
    backend.apply(Plan(0.0, 300.0, destroy=("a0-0",)))
    backend.forget(["a0"])
    assert backend.apps == {} and backend.counts["boot"] == 1


def _jobs(n: int, seed: int = 0) -> Workload:
    """``n`` jobs in three bursts on a small cluster: contention, stops, late finishes."""
    rng = np.random.default_rng(seed)
    submit = np.sort(np.concatenate([86400.0 * b + rng.uniform(0, 7200, n // 3)
                                     for b in range(3)]))
    m = len(submit)
    return Workload.from_arrays(submit=submit, run=rng.uniform(600, 6 * 3600, m),
                                procs=rng.integers(1, 4, m), memory=rng.uniform(100, 500, m),
                                deadline_factor=rng.uniform(1.2, 4, m))


def test_a_run_retains_only_its_active_applications(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _jobs(120)
    seen: list[tuple[int, int]] = []
    forget = Driver.forget

    def checked(self: Driver, apps: list[Any]) -> None:
        forget(self, apps)
        p, b, e = self.platform, self.backend, self.economy
        assert isinstance(b, SimBackend)
        # after every end: what the run keeps of applications is its active ones, exactly
        assert p.apps.keys() == p.active.keys() == b.apps.keys()
        assert e.allowances.keys() <= {a.account for a in p.active.values()}
        assert e.owners.keys() <= {a.account for a in p.active.values()}
        seen.append((len(apps), len(p.apps)))

    monkeypatch.setattr(Driver, "forget", checked)
    monkeypatch.setattr(trace, "LEDGER_REMEMBERS", 8)
    cluster = Cluster(4, 2, None)
    names = trace.policy_names(w, MarketConfig(), None)
    seg = trace.run_segment(w, cluster, MarketConfig(), names, 0, None, seed=2)
    assert sum(k for k, _ in seen) == len(w)  # every application ended and was let go
    assert max(kept for _, kept in seen) < len(w) // 3  # never more than a burst's
    assert seg.platform.apps == {} and seg.backend.apps == {} and seg.running == {}
    ledger = seg.economy.ledger
    assert isinstance(ledger, MemoryLedger)
    assert len(ledger._idem) <= 8 and len(ledger._single) <= 8
    out = seg.outcome(w, names, 0.0)
    assert out.audit_ok and "" not in out.outcomes
    assert np.isnan(out.start).sum() == out.outcomes.count("never-started") > 0
    # the same outcome as a run that keeps every application and reads them at its end
    monkeypatch.setattr(trace._TraceHooks, "ended", lambda *_: None)
    kept = trace.run_segment(w, cluster, MarketConfig(), names, 0, None, seed=2)
    assert len(kept.platform.apps) == len(w)
    ref = kept.outcome(w, names, 0.0)
    for f in ("start", "end", "finished", "met", "value", "work_done", "paid"):
        assert getattr(out, f).tobytes() == getattr(ref, f).tobytes(), f
    assert (out.reasons, out.outcomes, out.records, out.counts, out.bank) == \
        (ref.reasons, ref.outcomes, ref.records, ref.counts, ref.bank)


def test_the_bank_remembers_a_window_of_keys() -> None:
    with pytest.raises(ValueError, match="remember"):
        MemoryLedger(journal=True, remember=4)
    ledger = MemoryLedger(journal=False, remember=2)
    ledger.create_account("u", AccountKind.user)
    first = ledger.mint("u", 5, "a", idempotency_key="k1")
    assert ledger.mint("u", 5, "a", idempotency_key="k1") == first  # a replay: once
    with pytest.raises(IdempotencyConflict):
        ledger.mint("u", 6, "a", idempotency_key="k1")
    ledger.mint_many([("u", 1)], "b", idempotency_key="k2")
    ledger.mint_many([("u", 1)], "b", idempotency_key="k3")
    assert ledger.balance("u") == 7
    ledger.mint("u", 5, "a", idempotency_key="k1")  # forgotten: applied again
    assert ledger.balance("u") == 12 and ledger.audit().ok
