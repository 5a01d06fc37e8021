"""`merkat demo` (the main job of `make run`): the live service with its embedded platforms,
ending by itself with a report."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from merkat.service.demo import run_demo


@pytest.mark.slow
def test_the_demo_ends_by_itself_with_a_report(tmp_path: Path) -> None:
    out = io.StringIO()
    code = run_demo(duration=20.0, period=1.0, data_dir=tmp_path, out=out)
    text = out.getvalue()
    assert "== merkat demo report ==" in text
    lines = text.splitlines()
    assert any(line.startswith("deadline-a: deadline 11 s — ") for line in lines), text
    assert any(line.startswith("deadline-b: deadline 16 s — ") for line in lines), text
    assert any(line.startswith("best-effort: best effort — ") for line in lines), text
    assert "bank audit: OK" in text
    assert code == (0 if text.count("MET (") == 2 else 1)
    assert (tmp_path / "merkat.db").exists()
    assert (tmp_path / "logs" / "deadline-a" / "vm1.log").read_text().startswith("iteration 1/")
