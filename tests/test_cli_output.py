"""Tables piped to another program are printed whole (never cut at 80 columns)."""

from __future__ import annotations

import os
import subprocess
import sys


def _policy_table(env: dict[str, str]) -> str:
    r = subprocess.run([sys.executable, "-m", "merkat", "policy", "list"], env=env,
                       capture_output=True, text=True, timeout=120, check=True)
    return r.stdout


def test_a_piped_table_keeps_every_cell_whole() -> None:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    out = _policy_table(env)
    row = next(line for line in out.splitlines() if "deadline-partial" in line)
    # the whole parameter list of the policy is on its row, not folded or cut with an ellipsis
    assert "forecast_order=2" in row and "…" not in out
    assert max(len(line) for line in out.splitlines()) > 80


def test_columns_still_sets_the_width() -> None:
    out = _policy_table({**os.environ, "COLUMNS": "100"})
    assert max(len(line) for line in out.splitlines()) <= 100
