"""Hostile input to the client commands: names that cannot name anything on the server (bad
input, exit 2, one line naming the argument, before any request — not an internal error, nor
the answer of a route it was never meant for), and text a tenant wrote that the commands
print on someone else's terminal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


ESC = "\x1b[1A\x1b[2K\x1b]8;;http://evil\x07link\x1b]8;;\x07"  # up, erase, a hidden link


def test_what_a_tenant_wrote_cannot_drive_an_admins_terminal(tmp_path: Path) -> None:
    """A ``files_in`` name of ESC sequences (and a newline) came back in the VM's error, the
    platform's outcome and its events, and ``merkat events`` / ``platform list`` / ``show``
    printed them raw to whoever read them (an admin): the cursor moved up over earlier
    lines, a link hid behind text. Printed as escapes now, each event on one line."""
    import time

    from merkat.service.config import load_config
    from merkat.service.server import Service
    from test_service_e2e import free_port

    def cli(*args: str) -> Any:
        return runner.invoke(app, list(args))

    keys = {u: cli("user", "add", u, "--budget", "5", "--parsable", "--data-dir",
                   str(tmp_path)).stdout.strip() for u in ("mallory",)}
    root = cli("user", "add", "root", "--admin", "--parsable", "--data-dir",
               str(tmp_path)).stdout.strip()
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    url = f"http://127.0.0.1:{svc.port}"
    template = tmp_path / "t.yaml"
    name = json.dumps(f"x\nFAKE EVENT {ESC}")
    template.write_text("name: evil\ncontroller: {policy: best-effort}\nbudget: 1\nclusters:\n"
                        f"  - {{name: c, command: 'sleep 9', files_in: [{name}]}}\n")
    try:
        r = cli("submit", str(template), "--no-upload", "--url", url, "--token",
                keys["mallory"])
        assert r.exit_code == 0, r.stderr
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            row = svc.manager.store.platform("evil")
            if row is not None and row.state == "failed":
                break
            time.sleep(0.2)
        as_root = ("--url", url, "--token", root)
        outs = [cli("events", "--platform", "evil", *as_root).stdout,
                cli("platform", "list", *as_root).stdout,
                cli("platform", "show", "evil", *as_root).stdout]
        assert "\\x1b]8;;http://evil\\x07link" in outs[0]
        for out in outs:
            assert "\x1b" not in out and "\x07" not in out, out
        events = outs[0].splitlines()[1:]
        assert events and all(line.lstrip()[0].isdigit() for line in events), events
    finally:
        svc.shutdown()


def test_submit_reads_a_bounded_template(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``merkat submit /dev/zero`` read until memory ended (8 GB in 4 s on the shared
    machine, then the OOM killer). Past ``TEMPLATE_READ`` it is bad input, before any
    request (here the bound is lowered, so that the test cannot eat memory either way)."""
    from merkat.cli import client

    monkeypatch.setattr(client, "TEMPLATE_READ", 1024)
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 2048)
    code, err = run("submit", str(big))
    assert code == 2
    assert err.strip().splitlines() == [f"error: FILE: {big} holds more than 0 MiB: not a "
                                        "template"]


def test_an_upload_over_the_servers_limit_gets_its_reason(tmp_path: Path) -> None:
    """``merkat file put`` read the whole file, then sent it: the server answers 413 as
    soon as the length says so and reads no more than 64 × ``limits.body_bytes`` of it, so
    the rest met a closed connection: ``cannot reach the merkat server ... Connection reset
    by peer``, exit 1, as if no server ran. It asks first now (``Expect: 100-continue``) and
    streams the file: the server's reason, exit 2; a file within the limit goes through."""
    from merkat.service.config import load_config
    from merkat.service.server import Service
    from test_service_e2e import free_port

    key = runner.invoke(app, ["user", "add", "alice", "--parsable", "--data-dir",
                              str(tmp_path)]).stdout.strip()
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=30, admission=30,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")},
                      limits={"body_bytes": 1024}, tenants={"max_file": 4096})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    big, small = tmp_path / "big.dat", tmp_path / "small.dat"
    big.write_bytes(b"x" * (4 << 20))
    small.write_bytes(b"y" * 4096)
    auth = ["--url", f"http://127.0.0.1:{svc.port}", "--token", key]
    try:
        r = runner.invoke(app, ["file", "put", str(big), *auth])
        assert (r.exit_code, r.stderr) == (2, "error: body: larger than 4096 bytes\n")
        r = runner.invoke(app, ["file", "put", str(small), *auth])
        assert (r.exit_code, r.stdout) == (0, "file small.dat uploaded (4096 bytes)\n")
        r = runner.invoke(app, ["file", "put", str(small), "--url", auth[1], "--token", "no"])
        assert r.exit_code == 2 and "refused the API key" in r.stderr
    finally:
        svc.shutdown()


@pytest.mark.parametrize("args", [("events", "--since"), ("prices", "--since")])
@pytest.mark.parametrize(("value", "says"), [
    ("99999999999d", "'99999999999d' ago is before 1970-01-01 (Unix time 0)"),
    ("１２３", "expected ASCII digits"), ("５m", "expected ASCII digits"),
    ("٣h", "expected ASCII digits")])
def test_a_time_before_1970_or_in_other_digits_is_refused_before_any_request(
        args: tuple[str, ...], value: str, says: str) -> None:
    """``--since 99999999999d`` went to the server as a negative time (``error: since: Input
    should be greater than or equal to 0``, not naming the flag; ``merkat report --until``
    the same: 'no period and no event in the range (start .. -)'); fullwidth or Arabic-Indic
    digits were read as a time (money refuses them: docs/bank.md)."""
    code, err = run(*args, value)
    assert code == 2, err
    assert err.strip().splitlines() == [f"error: --since: {err.split('--since: ')[1].strip()}"]
    assert says in err


@pytest.mark.parametrize("flag", ["--since", "--until"])
def test_report_refuses_a_time_before_1970(flag: str, tmp_path: Path) -> None:
    r = runner.invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "r.html"),
                            flag, "100000d"])
    assert r.exit_code == 2 and r.stderr.strip() == (
        f"error: {flag}: '100000d' ago is before 1970-01-01 (Unix time 0)")


@pytest.mark.parametrize(("url", "says"), [
    ("http://127.0.0.1:99999", "(Port out of range 0-65535)"),
    ("http://[::1", "(Invalid IPv6 URL)"), ("http://127.0.0.1:abc", "Port could not be cast"),
    ("http://127.0.0.1:9\n", ""), ("http://127.0.0.1:9/x y", ""), ("http://h\x1b[2J", ""),
    ("http://user:pw@127.0.0.1:9", "a user or password in the URL is not supported")])
@pytest.mark.parametrize("args", [("prices",), ("file", "put", "{f}")])
def test_a_url_no_request_can_go_to_is_refused_naming_url(
        url: str, says: str, args: tuple[str, ...], tmp_path: Path) -> None:
    """``--url http://127.0.0.1:99999`` (file put), ``http://[::1``, ``:abc``, a newline or a
    space were internal errors (ValueError, InvalidURL); a password was printed back in
    every error."""
    (tmp_path / "f").write_text("x")
    argv = [a.replace("{f}", str(tmp_path / "f")) for a in args]
    r = runner.invoke(app, [*argv, "--url", url, "--token", "mk_x"])
    assert r.exit_code == 2, r.stderr
    (line,) = r.stderr.strip().splitlines() or [""]
    assert line.startswith("error: --url: ") and says in line and "pw" not in line


@pytest.mark.parametrize("token", ["mk_a\nb", "mk_a b", "mk_é", "mk_\x1b[2J"])
def test_a_key_no_header_can_carry_is_refused_without_printing_it(token: str) -> None:
    """``MERKAT_TOKEN=$'a\\nb' merkat prices`` was ``ValueError: Invalid header value``, an
    internal error with the key in it."""
    for args in (("prices", "--token", token), ("account", "list", "--token", token)):
        r = runner.invoke(app, [*args, "--url", DEAD])
        assert r.exit_code == 2, r.stderr
        assert r.stderr.strip() == (
            "error: --token: not an API key: it holds a space, a control or a non-ASCII "
            "character (a key is as `merkat user add` prints it); check MERKAT_TOKEN")
    r = runner.invoke(app, ["prices", "--url", DEAD], env={"MERKAT_TOKEN": " mk_x\n"})
    assert r.exit_code == 1 and "cannot reach the merkat server" in r.stderr  # spaces around


@pytest.mark.parametrize(("args", "flag"), [
    (("platform", "logs", "p", "--tail", "100001"), "--tail"),
    (("account", "history", "alice", "--limit", "10001"), "--limit"),
    (("events", "--after", str(2**63)), "--after")])
def test_a_count_past_the_servers_bound_is_refused_naming_the_flag(
        args: tuple[str, ...], flag: str) -> None:
    """They went to the server, whose 422 named its query parameter (``error: limit: Input
    should be less than or equal to 10000``), not the flag."""
    code, err = run(*args)
    assert code == 2 and err.startswith(f"error: Invalid value for '{flag}'"), err
