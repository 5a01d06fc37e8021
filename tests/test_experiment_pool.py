"""How a sweep's runs are spread over processes (merkat.experiments.registry._execute_all)."""

from __future__ import annotations

import threading
from typing import Any

from merkat.experiments import registry


def _row(run: int) -> dict[str, Any]:
    return {"label": str(run), "seed": run}


def test_rows_come_back_in_run_order_while_this_process_does_other_work() -> None:
    called = threading.Event()
    rows = registry._execute_all(_row, list(range(7)), 2, None, None, meanwhile=called.set)
    assert [r["seed"] for r in rows] == list(range(7))
    assert called.wait(5.0)  # the parent's work was done on the side


def test_a_failing_side_task_does_not_fail_the_sweep() -> None:
    def boom() -> None:
        raise RuntimeError("no plotting library")

    rows = registry._execute_all(_row, [3, 1], 2, None, None, meanwhile=boom)
    assert [r["seed"] for r in rows] == [3, 1]
