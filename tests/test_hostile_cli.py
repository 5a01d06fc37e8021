"""Hostile input to the client commands themselves (before any request): names that cannot
name anything on the server. Each is bad input, exit 2, one line naming the argument — not an
internal error, nor the answer of a route it was never meant for."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from merkat.cli import app
from merkat.cli.api import PLATFORM_NAME
from merkat.service.templates import NAME

runner = CliRunner()
DEAD = "http://127.0.0.1:9"  # nothing listens: a request would fail with exit 1


def run(*args: str) -> tuple[int, str]:
    r = runner.invoke(app, [*args, "--url", DEAD, "--token", "mk_x"])
    return r.exit_code, r.stderr


@pytest.mark.parametrize("args", [
    ("platform", "show"), ("platform", "stop"), ("platform", "delete"), ("platform", "logs"),
    ("platform", "boost", "{}", "5")])
@pytest.mark.parametrize("name", ["", "a/b", "../etc", "é", "x" * 64])
def test_a_name_no_platform_can_have_is_refused_before_any_request(
        args: tuple[str, ...], name: str) -> None:
    """``platform show ''`` asked for ``/platforms/`` (redirected to the list: ``KeyError:
    'state'``, an internal error), ``delete ''`` printed ``HTTP 307 Temporary Redirect`` and
    ``stop a/b`` the router's ``Not Found``."""
    argv = [a.replace("{}", name) for a in args] if "{}" in args else [*args, name]
    code, err = run(*argv)
    assert code == 2, (argv, err)
    assert err.strip().splitlines() == [
        f"error: NAME: {name!r} is not a platform name (1-63 of A-Z a-z 0-9 _.-, starting "
        "with a letter or a digit)"]


@pytest.mark.parametrize("cmd", ["balance", "history"])
@pytest.mark.parametrize("name", ["", "a/b"])
def test_an_account_name_that_names_nothing_is_refused(cmd: str, name: str) -> None:
    """``account balance ''`` was ``KeyError: 'name'`` (the account list answered)."""
    code, err = run("account", cmd, name)
    assert code == 2, err
    assert err.strip().splitlines() == [
        f"error: NAME: {name!r} names nothing on the server (an empty name, or one with '/')"]


def test_the_clients_platform_name_is_the_templates() -> None:
    assert PLATFORM_NAME.pattern == NAME
