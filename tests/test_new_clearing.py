"""A period whose clearing is new (issue 28, twenty-third session), its fast paths against
their references.

The bills of a market whose every VM is placed, without the hosted mask
(:data:`merkat.core.bills.PLACED`), against the reference (the mask and
``_per_application`` every time): hypothesis over the numpy bills' inputs (every VM placed
or not, VMs hosted before or not, one run per application or several, bids of zeros, signed
zeros, halves of a micro-credit and large values, traded columns of one or two resources)
gives the same bills, element for element and type for type, and the same usage; and whole
flaky trace runs with the flag on and off log the same plans, bills, usage, charges and
records after every commit and end with the same digest."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merkat.core import bills
from merkat.market import NO_HOST, RESOURCES
from test_unchanged import _trace

_BIDS = st.sampled_from([0.0, -0.0, 0.5e-6, 1.5e-6, 2.5e-6, 1.0, 0.3, 1e-7, 123.456, 4e12])
_KINDS = [(("cpu", 0),), (("memory", 1),), (("cpu", 0), ("memory", 1))]


@st.composite
def _inputs(draw: Any) -> tuple[Any, ...]:
    counts = draw(st.lists(st.integers(1, 5), min_size=1, max_size=7))
    n = sum(counts)
    names = [f"a{k}" for k in range(len(counts))]
    if draw(st.booleans()):  # (several runs of one application: the sums per id)
        names = draw(st.lists(st.sampled_from(names), min_size=len(counts),
                              max_size=len(counts)))
    kinds = [draw(st.sampled_from(_KINDS)) for _ in counts]
    every = draw(st.booleans())
    host = np.array([draw(st.integers(0 if every else NO_HOST, 3)) for _ in range(n)],
                    dtype=np.int64)
    before = np.array([draw(st.integers(NO_HOST, 3)) for _ in range(n)], dtype=np.int64)
    bid = np.array([[draw(_BIDS) for _ in RESOURCES] for _ in range(n)], dtype=np.float64)
    alloc = np.array([[draw(st.floats(0.0, 1.0)) for _ in RESOURCES] for _ in range(n)])
    price = [draw(st.floats(0.0, 5.0)) for _ in RESOURCES]
    return names, counts, kinds, host, before, alloc, bid, price, 0


@settings(max_examples=150, deadline=None)
@given(args=_inputs())
def test_the_bills_without_the_mask_are_the_reference_s(args: tuple[Any, ...]) -> None:
    saved = bills.PLACED
    try:
        bills.PLACED = False
        want, want_use = bills._bills_numpy(*args)
        bills.PLACED = True
        got, got_use = bills._bills_numpy(*args)
    finally:
        bills.PLACED = saved
    assert type(got) is tuple and got == want
    assert [tuple(map(type, b)) for b in got] == [tuple(map(type, b)) for b in want]
    assert got_use.rows == want_use.rows


@pytest.mark.parametrize(("policy", "hosts"), [("deadline-strict", 12), ("deadline-strict", 40)])
def test_a_trace_run_without_the_mask_is_the_same_run(
        monkeypatch: pytest.MonkeyPatch, policy: str, hosts: int) -> None:
    """``test_cow``'s flaky trace run (failed operations, withheld bills) with
    :data:`~merkat.core.bills.PLACED` on and off: the same log after every commit and the
    same digest; the path without the mask was taken."""
    taken = [0]
    numpy_bills = bills._bills_numpy

    def counting(*a: Any) -> Any:
        taken[0] += bills.PLACED and bool((a[3] != NO_HOST).all())
        return numpy_bills(*a)

    logs = []
    for placed in (True, False):
        monkeypatch.setattr(bills, "PLACED", placed)
        monkeypatch.setattr(bills, "_bills_numpy", counting)
        log, _seen, digest = _trace(monkeypatch, False, policy, hosts)
        monkeypatch.undo()
        logs.append((log, digest))
    (log, digest), (ref_log, ref_digest) = logs
    assert taken[0] > 20
    assert len(log) == len(ref_log) > 100
    assert log == ref_log and digest == ref_digest
