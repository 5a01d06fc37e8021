"""The admin's user commands on a data directory that holds no server: a mistyped
``--data-dir`` is said so, and nothing is created there."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app

runner = CliRunner()


@pytest.mark.parametrize("args", [
    ("user", "list"), ("user", "remove", "alice"), ("user", "rotate-key", "alice"),
    ("user", "quota", "alice"), ("user", "quota", "alice", "--vms", "3")])
def test_a_data_dir_without_a_server_is_said_so_and_left_alone(
        args: tuple[str, ...], tmp_path: Path) -> None:
    """``merkat user list --data-dir TYPO`` made TYPO/merkat.db, an empty server, and listed
    nobody (exit 0); ``remove``, ``rotate-key`` and ``quota`` answered 'unknown user'."""
    typo = tmp_path / "typo"
    r = runner.invoke(app, [*args, "--data-dir", str(typo)])
    assert r.exit_code == 2 and r.stderr.strip() == (
        f"error: --data-dir: no merkat server data in {typo} (no merkat.db); give the "
        "server's --data-dir (merkat user add creates it)")
    assert not typo.exists()
    # the same directory once a user was added: the commands work
    assert runner.invoke(app, ["user", "add", "alice", "--data-dir", str(typo)]).exit_code == 0
    r = runner.invoke(app, [*args, "--data-dir", str(typo)])
    assert r.exit_code == 0, r.stderr
