"""Must-show of issue 26: after every platform of a live run has ended — finished, stopped by
its owner, out of budget — each owner's balance is what she started with minus what her
platforms paid, every ``app:`` account is at 0, and ``merkat bank audit`` passes on the
server's database. A real server (uvicorn, its period loop, the local backend) and the CLI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.test_service_e2e import ENV, api, cli, free_port, wait

from merkat.service.config import load_config
from merkat.service.server import Service

BE = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: {command}
    cpu: 0.5
    memory: 64
    min_memory: 16
"""


def balance(env: dict[str, str], account: str) -> str:
    r = cli("account", "balance", account, "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    return str(json.loads(r.stdout)["balance"])


@pytest.mark.slow  # a dozen CLI processes
def test_after_every_platform_ended_each_owner_holds_start_minus_paid(tmp_path: Path) -> None:
    keys = {}
    for user, budget in (("alice", "100"), ("bob", "50")):
        r = cli("user", "add", user, "--budget", budget, "--data-dir", str(tmp_path),
                "--parsable")
        assert r.returncode == 0, r.stderr
        keys[user] = r.stdout.strip()
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-e2e-{uuid.uuid4().hex[:8]}"})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    url = f"http://127.0.0.1:{svc.port}"
    env = {u: {**ENV, "MERKAT_URL": url, "MERKAT_TOKEN": k} for u, k in keys.items()}
    plans: dict[str, tuple[str, str, str]] = {  # name: owner, budget, command
        "quick": ("alice", "20", "sleep 1"),
        "long": ("alice", "30", "sleep 600"),
        "broke": ("bob", "0.006", "sleep 600"),  # the reserve costs 0.002 a period
    }
    try:
        for name, (owner, budget, command) in plans.items():
            f = tmp_path / f"{name}.yaml"
            f.write_text(BE.format(name=name, budget=budget, command=command))
            r = cli("submit", str(f), "--parsable", env=env[owner])
            assert (r.returncode, r.stdout) == (0, f"{name}\n"), r.stderr
        wait(lambda: api(env["alice"], "/platforms/long")["state"] == "running")
        r = cli("platform", "stop", "long", env=env["alice"])
        assert r.returncode == 0, r.stderr
        ended = ("finished", "stopped", "failed")

        def rows() -> dict[str, Any]:
            return {n: api(env[o], f"/platforms/{n}") for n, (o, _, _) in plans.items()}

        wait(lambda: all(p["state"] in ended for p in rows().values()), 30)
        got = rows()
        assert {n: p["state"] for n, p in got.items()} == {
            "quick": "finished", "long": "stopped", "broke": "stopped"}
        paid = {n: p["spent"] for n, p in got.items()}
        assert all(x > 0 for x in paid.values()), paid
        for name, (owner, _, _) in plans.items():
            assert balance(env[owner], f"app:{name}") == "0"
        alice = float(balance(env["alice"], "alice"))
        bob = float(balance(env["bob"], "bob"))
        assert abs(alice - (100 - paid["quick"] - paid["long"])) < 1e-6, (alice, paid)
        assert abs(bob - (50 - paid["broke"])) < 1e-6, (bob, paid)
        events = api(env["alice"], "/events?limit=1000")["items"]
        assert sorted(e["platform"] for e in events if e["kind"] == "returned") == [
            "long", "quick"]
    finally:
        svc.shutdown()
    r = cli("bank", "audit", "--db", cfg.database, "-o", "json")
    assert r.returncode == 0, r.stderr
    audit = json.loads(r.stdout)
    assert audit["ok"] is True, audit
