"""Hostile input against ``merkat market clear`` (issue 18, items 7 and 8): huge numbers,
deep nesting, non-UTF-8 bytes, /dev/zero; prices and ideal allocations stay right at the
bounds of the format."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from merkat.cli import app
from merkat.market import clear
from merkat.market.io import MAX_QUANTITY, clearing_to_dict, decode_market, parse_market

runner = CliRunner()


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    return r.exit_code, r.stdout, r.stderr


def _doc(bids: list[float], cpu: float = 8.0) -> dict[str, object]:
    return {
        "hosts": [{"id": "h", "cpu": cpu, "memory": 1024}],
        "vms": [
            {"id": f"v{i}", "bid": {"cpu": b, "memory": 1}, "max": {"cpu": None, "memory": None}}
            for i, b in enumerate(bids)
        ],
    }


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe{\x00}\x00", "not UTF-8"),
        (b"[" * 100_000 + b"]" * 100_000, "nested more than"),
        (b'{"hosts": [{"id": "h", "cpu": ' + b"9" * 5000 + b', "memory": 1}], "vms": []}',
         "not valid JSON"),
        (json.dumps(_doc([1e17, 1e17])).encode(), "less than or equal"),
        (json.dumps(_doc([1.0], cpu=1e300)).encode(), "less than or equal"),
    ],
)  # fmt: skip
def test_hostile_documents_are_one_line_errors(
    tmp_path: Path, content: bytes, message: str
) -> None:
    f = tmp_path / "m.json"
    f.write_bytes(content)
    code, out, err = run("market", "clear", str(f))
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_dev_zero_is_refused_not_read_forever() -> None:
    code, _, err = run("market", "clear", "/dev/zero")
    assert code == 2 and "larger than" in err


@settings(max_examples=60, deadline=None)
@given(
    bids=st.lists(
        st.one_of(
            st.floats(0, MAX_QUANTITY),
            st.sampled_from([MAX_QUANTITY, 1e-12, 0.0, 1.0]),
        ),
        min_size=1,
        max_size=30,
    ),
    cpu=st.one_of(st.floats(1e-6, MAX_QUANTITY), st.sampled_from([MAX_QUANTITY, 1.0])),
)
def test_prices_and_allocations_at_the_bounds(bids: list[float], cpu: float) -> None:
    hosts, vms, reserve, params = parse_market(decode_market(json.dumps(_doc(bids, cpu)).encode()))
    doc = clearing_to_dict(hosts, vms, clear(hosts, vms, reserve_price=reserve, params=params))
    price = doc["prices"]["cpu"]
    assert price is not None and math.isfinite(price)
    assert price == pytest.approx(math.fsum(bids) / cpu, rel=1e-9)
    ideal = [v["ideal"]["cpu"] for v in doc["vms"]]
    assert all(0 <= x <= cpu * (1 + 1e-12) for x in ideal)
    assert math.fsum(ideal) <= cpu * (1 + 1e-9)
    json.dumps(doc, allow_nan=False)  # valid JSON: no NaN, no Infinity


def test_a_subnormal_price_still_shares_within_the_capacity() -> None:
    """Found by hypothesis: bids of ~1e-309 on 848394 CPUs set a subnormal price whose lost
    digits made ``bid / price`` exceed the capacity (docs/market.md, share.py)."""
    bids, cpu = [2.225e-309], 848394.0
    hosts, vms, reserve, params = parse_market(decode_market(json.dumps(_doc(bids, cpu)).encode()))
    doc = clearing_to_dict(hosts, vms, clear(hosts, vms, reserve_price=reserve, params=params))
    assert 0 < doc["prices"]["cpu"] < 2.3e-308
    assert doc["vms"][0]["ideal"]["cpu"] == pytest.approx(cpu, rel=1e-12)
    assert doc["vms"][0]["ideal"]["cpu"] <= cpu * (1 + 1e-12)
