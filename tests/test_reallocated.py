"""A period that rebids or reallocates an application's VMs (none added, dropped or moved)
keeps its next state as the record's clean one (``draft.INSTALLED``), and the SLO row of
columns whose only new list is the allocations' reads only the least allocation anew
(``batch_slo.REALLOCATED``): issue 28, twenty-fourth session.

Pinned against the reference (both flags off: such a next state dropped at its commit, a
new one drafted the next period; every value of the row read anew): ``test_cow``'s flaky
trace runs (suspends, resumes, migrations, one operation in four failed, one bill in nine
withheld, admission points) and ``test_one_visit``'s batched applications beside scalar
ones trading two resources give the same plan, bills, charges and every record's fields
and columns after every commit (``test_unchanged``'s log), and the same digest, both ways;
each new path is taken, counted from outside."""

from __future__ import annotations

import operator
from typing import Any

import pytest

from merkat.core import batch_slo, commit, draft
from merkat.core.model import App, AppNext
from test_unchanged import _trace, _watch, mixed_run


def _count(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the new paths' cases, seen from outside: ``kept``, next states installed
    with only their allocations' list their own and left as the record's clean one;
    ``handed``, such a one handed out again by ``as_is``; ``rows``, SLO rows read from
    columns whose ids, states and bids are the lists the row last read."""
    seen = {"kept": 0, "handed": 0, "rows": 0}
    install_each, as_is, row_of = draft.install_each, draft.as_is, batch_slo.row_of
    kept: set[int] = set()

    def installing(pairs: Any) -> None:
        pairs = list(pairs)
        before = [(app.columns, nx) for app, nx in pairs]
        install_each(pairs)
        for (app, _), (cols, nx) in zip(pairs, before, strict=True):
            if app.clean is nx and any(map(operator.is_not, cols, app.columns)):
                seen["kept"] += 1
                kept.add(id(nx))

    def handing(app: App, columns: Any) -> AppNext:
        out = as_is(app, columns)
        if out is app.clean and id(out) in kept:
            seen["handed"] += 1
        return out

    def reading(app: App, k: Any, obs: Any) -> Any:
        kc = k.cols
        if (kc is not None and app.columns is not kc
                and all(app.columns[j] is kc[j] for j in (0, 1, 2))):
            seen["rows"] += 1
        return row_of(app, k, obs)

    monkeypatch.setattr(draft, "install_each", installing)
    monkeypatch.setattr(batch_slo, "as_is", handing)
    monkeypatch.setattr(batch_slo, "row_of", reading)
    return seen


def _flags(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(draft, "INSTALLED", on)
    monkeypatch.setattr(batch_slo, "REALLOCATED", on)


@pytest.mark.parametrize(("policy", "hosts"), [("deadline-strict", 12), ("vertical-deadline", 6),
                                               ("deadline-strict", 20)])
def test_a_trace_run_equals_the_reference_run(monkeypatch: pytest.MonkeyPatch, policy: str,
                                              hosts: int) -> None:
    runs = []
    for on in (True, False):
        _flags(monkeypatch, on)
        seen = _count(monkeypatch)
        monkeypatch.setattr(commit, "install_each", draft.install_each)  # (as it calls it)
        log, _, digest = _trace(monkeypatch, False, policy, hosts)  # (undoes the patches)
        runs.append((log, digest, seen))
    (log, digest, seen), (ref_log, ref_digest, ref_seen) = runs
    assert seen["kept"] > 100, seen
    if policy == "deadline-strict":  # (vertical-deadline rebids nearly every period)
        assert seen["handed"] > 10 and seen["rows"] > 10, seen
    assert ref_seen["kept"] == ref_seen["handed"] == 0
    assert len(log) > 100 and digest == ref_digest
    assert log == ref_log  # (every commit's plan, bills, charges and records)


def test_batched_beside_scalar_controllers_equal_the_reference_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    runs = []
    for on in (True, False):
        _flags(monkeypatch, on)
        log, _ = _watch(monkeypatch, False)
        mixed_run(monkeypatch)
        monkeypatch.undo()
        runs.append(log)
    log, ref_log = runs
    assert len(log) >= 30 and any(e[0][1] for e in log)  # (admission points too)
    assert log == ref_log
