"""The template's plugin commands (Merkat §4.3): which command runs on which state change, its
environment and log, and a command that cannot be started reported as a message."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from merkat.service.plugins import run_plugin
from merkat.service.templates import Commands

CMDS = Commands(**{k: f'echo {k} "$MERKAT_PLATFORM" "$MERKAT_STATE" >> {{out}}'
                   for k in ("start", "suspend", "resume", "stop")})


def _wait_lines(path: Path, n: int) -> list[str]:
    end = time.monotonic() + 10
    while time.monotonic() < end:
        lines = path.read_text().splitlines() if path.exists() else []
        if len(lines) >= n:
            return lines
        time.sleep(0.02)
    raise AssertionError(f"{path}: fewer than {n} lines")


@pytest.mark.parametrize(("old", "new", "line"), [
    ("waiting", "running", "start p running"),
    ("suspended", "running", "resume p running"),
    ("running", "suspended", "suspend p suspended"),
    ("running", "finished", "stop p finished"),
    ("suspended", "stopped", "stop p stopped"),
])
def test_each_transition_runs_its_command(tmp_path: Path, old: str, new: str, line: str) -> None:
    out = tmp_path / "out"
    cmds = Commands(**{k: v.replace("{out}", str(out)) for k, v in CMDS.model_dump().items()
                       if v is not None})
    assert run_plugin(cmds, tmp_path, "p", old, new) is None
    assert _wait_lines(out, 1) == [line]
    assert (tmp_path / "logs" / "p" / "plugins.log").exists()


def test_no_command_no_process_no_log(tmp_path: Path) -> None:
    assert run_plugin(Commands(), tmp_path, "p", "waiting", "running") is None
    assert run_plugin(CMDS, tmp_path, "p", "queued", "waiting") is None  # no such event
    assert run_plugin(CMDS, tmp_path, "p", "running", "failed") is None
    assert not (tmp_path / "logs").exists()


def test_a_command_that_cannot_start_is_a_message(tmp_path: Path) -> None:
    (tmp_path / "logs" / "p" / "plugins.log").mkdir(parents=True)  # the log cannot be opened
    msg = run_plugin(Commands(start="true"), tmp_path, "p", "waiting", "running")
    assert msg is not None and msg.startswith("p: cannot run 'true': ") and "plugins.log" in msg
