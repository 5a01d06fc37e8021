"""The traces index behind ``merkat traces list``: the bundled index matches the bundled traces
(so it cannot go stale), listing reads no indexed trace, and user traces are described once,
cached, and described again when they change."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.workload import trace_index as ti
from merkat.workload import traces as tr

runner = CliRunner()

SWF = b"""; a header line
; MaxProcs: 4
1 100 0 50 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1
2 250 0 50 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1

3 40 0 50 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1
"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("MERKAT_TRACES", raising=False)
    monkeypatch.setattr(tr, "checkout_dir", lambda: tmp_path / "no-checkout")


def listing() -> dict[str, dict[str, Any]]:
    r = runner.invoke(app, ["traces", "list", "-o", "json"])
    assert r.exit_code == 0, r.output
    return {i["name"]: i for i in json.loads(r.stdout)["items"]}


def test_the_bundled_index_is_the_bundled_traces_described() -> None:
    shipped = json.loads(ti.bundled_index_path().read_text())
    assert shipped["version"] == ti.VERSION
    assert shipped["traces"] == ti.build_bundled()  # rebuild: python -m ...trace_index
    e = shipped["traces"]["HPC2N-2002-2.2-cln.swf.gz"]
    assert e["jobs"] == tr.ARCHIVE["HPC2N-2002-2.2-cln"].jobs == 202_871
    assert e["sha256"] == tr.ARCHIVE["HPC2N-2002-2.2-cln"].sha256
    assert (e["first_submit_s"], e["last_submit_s"], e["span_s"]) == (
        342_072, 109_583_573, 109_241_501)


def test_describe_counts_jobs_span_and_checksums_the_text(tmp_path: Path) -> None:
    p = tmp_path / "t.swf"
    p.write_bytes(SWF)
    e = ti.describe(p)
    assert e == {
        "name": "t", "jobs": 3, "first_submit_s": 40, "last_submit_s": 250, "span_s": 210,
        "sha256": hashlib.sha256(SWF).hexdigest(), "size": len(SWF),
    }


def test_listing_reads_no_indexed_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "mine.swf").write_bytes(SWF)
    monkeypatch.setenv("MERKAT_TRACES", str(own))
    first = listing()  # computes mine, caches it; the bundled one from the shipped index
    assert first["mine"]["jobs"] == 3 and first["mine"]["span_s"] == 210
    assert first["HPC2N-2002-2.2-cln"]["jobs"] == 202_871
    assert ti.user_index_path().is_file()

    def no_reading(path: Path) -> dict[str, Any]:
        raise AssertionError(f"read {path}")

    monkeypatch.setattr(ti, "describe", no_reading)
    assert listing() == first  # every answer from the indexes


def test_a_changed_user_trace_is_described_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    p = own / "mine.swf"
    p.write_bytes(SWF)
    monkeypatch.setenv("MERKAT_TRACES", str(own))
    assert listing()["mine"]["jobs"] == 3
    p.write_bytes(SWF + b"4 900 0 50 1 -1 -1 1 60 -1 1 1 1 -1 1 -1 -1 -1\n")
    again = listing()["mine"]
    assert (again["jobs"], again["span_s"]) == (4, 860)


def test_a_corrupt_user_index_is_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "mine.swf").write_bytes(SWF)
    monkeypatch.setenv("MERKAT_TRACES", str(own))
    ti.user_index_path().parent.mkdir(parents=True)
    ti.user_index_path().write_text("{not json")
    assert listing()["mine"]["jobs"] == 3
    doc = json.loads(ti.user_index_path().read_text())
    assert [e["jobs"] for e in doc["traces"].values()] == [3]


def test_an_unreadable_trace_warns_and_lists_the_rest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    own = tmp_path / "own"
    own.mkdir()
    (own / "broken.swf.gz").write_bytes(b"\x1f\x8b\x08\x00truncated")
    monkeypatch.setenv("MERKAT_TRACES", str(own))
    r = runner.invoke(app, ["traces", "list", "-o", "json"])
    assert r.exit_code == 0
    items = {i["name"]: i for i in json.loads(r.stdout)["items"]}
    assert items["broken"]["jobs"] is None and items["broken"]["sha256"] is None
    assert items["HPC2N-2002-2.2-cln"]["jobs"] == 202_871
    assert "broken.swf.gz: cannot read" in r.stderr
