"""End to end: `merkat user add`, a real uvicorn server on a free loopback port with its period
loop, and the client CLI against it (MERKAT_URL, MERKAT_TOKEN) — the interfaces other tools
rely on, errors and exit codes, and (as root) the cgroup quota following the allocation."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.local import pid_alive
from merkat.backends.local.cgroups import detect
from merkat.service.config import load_config
from merkat.service.server import Service

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}

SPIN = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: exec "$MERKAT_PYTHON" -m merkat.examples.solver --iterations 1000000 --cost 0.05
    cpu: 1
    memory: 96
    min_memory: 32
    monitor: {{kind: log, regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'}}
"""
LIGHT_SPIN = SPIN.replace("    cpu: 1\n", "    cpu: 0.25\n")
"""A spinning VM of a quarter of a core, for the tests that need a VM working, not a full
CPU: a VM of one core takes a core from the other pytest worker for the whole test."""


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True,
                          text=True, env=env or ENV, timeout=60, cwd=ROOT)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Service, dict[str, str]]]:
    r = cli("user", "add", "alice", "--budget", "100", "--data-dir", str(tmp_path), "--parsable")
    assert r.returncode == 0, r.stderr
    key = r.stdout.strip()
    assert key.startswith("mk_") and "\n" not in key  # the key alone
    bob = cli("user", "add", "bob", "--data-dir", str(tmp_path), "--parsable").stdout.strip()
    cfg = load_config(None, data_dir=tmp_path, port=free_port(), period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-e2e-{uuid.uuid4().hex[:8]}"})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{svc.port}", "MERKAT_TOKEN": key}
    try:
        yield svc, {"alice": env, "bob": {**env, "MERKAT_TOKEN": bob}}
    finally:
        svc.shutdown()


def wait(cond: Any, timeout: float = 20.0) -> Any:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out")


def show(env: dict[str, str], name: str) -> Any:
    r = cli("platform", "show", name, "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def api(env: dict[str, str], path: str) -> Any:
    """GET through the API directly (fast polling; the CLI checks the interfaces)."""
    req = urllib.request.Request(f"{env['MERKAT_URL']}/api/v1{path}")
    req.add_header("Authorization", f"Bearer {env['MERKAT_TOKEN']}")
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


@pytest.mark.slow  # a dozen CLI processes
def test_the_cli_against_a_live_server(server: Any, tmp_path: Path) -> None:
    svc, envs = server
    env = envs["alice"]
    f = tmp_path / "spin.yaml"
    f.write_text(LIGHT_SPIN.format(name="spin", budget=20))
    r = cli("submit", str(f), "--parsable", env=env)
    assert (r.returncode, r.stdout) == (0, "spin\n"), r.stderr
    items = json.loads(cli("platform", "list", "-o", "json", env=env).stdout)["items"]
    assert [(p["name"], p["owner"]) for p in items] == [("spin", "alice")]
    assert set(items[0]) >= {"name", "state", "owner"}
    wait(lambda: (s := api(env, "/platforms/spin"))["state"] == "running" and s["vms"])
    p = show(env, "spin")
    (vm,) = p["vms"]
    assert set(vm) >= {"id", "node", "state", "bid", "allocation", "cgroup"}
    assert set(vm["bid"]) == set(vm["allocation"]) == {"cpu", "memory"}
    assert 0 < vm["allocation"]["cpu"] <= 0.25  # a light VM (LIGHT_SPIN)
    prices = json.loads(cli("prices", "-o", "json", env=env).stdout)
    assert set(prices) >= {"time", "cpu", "memory"}
    bal = json.loads(cli("account", "balance", "alice", "-o", "json", env=env).stdout)
    assert bal == {"name": "alice", "balance": "80"}  # 100 minus the platform's budget of 20
    wait(lambda: "iteration" in cli("platform", "logs", "spin", env=env).stdout, 60)
    # Boosting (Tycoon §3): 5 more credits from alice to the running platform, once.
    r = cli("platform", "boost", "spin", "5", "-o", "json", env=env)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["amount"] == "5"
    bal = json.loads(cli("account", "balance", "alice", "-o", "json", env=env).stdout)
    assert bal == {"name": "alice", "balance": "75"}
    r = cli("platform", "boost", "spin", "1000", env=env)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
    # Someone else's platform: 404 → exit 2, one line; no key: exit 2; no server: exit 1.
    r = cli("platform", "show", "spin", env=envs["bob"])
    assert r.returncode == 2 and r.stderr.strip() == "error: no platform 'spin'"
    r = cli("platform", "list", env={**env, "MERKAT_TOKEN": ""})
    assert r.returncode == 2 and "MERKAT_TOKEN" in r.stderr
    r = cli("platform", "list", env={**env, "MERKAT_URL": f"http://127.0.0.1:{free_port()}"})
    assert r.returncode == 1 and "cannot reach the merkat server" in r.stderr
    assert "Traceback" not in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(SPIN.format(name="bad", budget=-3))
    r = cli("submit", str(bad), env=env)
    assert r.returncode == 2 and "line 3: budget: Input should be greater than or equal to 0" \
        in r.stderr
    r = cli("submit", str(tmp_path / "nope.yaml"), env=env)
    assert r.returncode == 2 and "cannot read" in r.stderr
    # Stop: the VM is destroyed, the outcome recorded.
    r = cli("platform", "stop", "spin", env=env)
    assert r.returncode == 0, r.stderr
    p = wait(lambda: (s := api(env, "/platforms/spin"))["state"] == "stopped" and s)
    assert p["reason"] == "stopped by the user" and p["vms"] == []
    assert p["outcome"] == "stopped"
    assert svc.store.ledger.audit().ok


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_the_cgroup_quota_follows_the_allocation_and_budgets_run_out(
        cpu_heavy: int, server: Any, tmp_path: Path) -> None:
    svc, envs = server
    env = envs["alice"]
    assert svc.backend.enforced
    for name, budget in (("rich", 50), ("poor", 0.02)):
        f = tmp_path / f"{name}.yaml"
        f.write_text(SPIN.format(name=name, budget=budget))
        assert cli("submit", str(f), env=env).returncode == 0

    def quota(vm: dict[str, Any]) -> float:
        tree = svc.backend.tree
        d = tree.root / "cpu" / vm["cgroup"] if tree.version.value == "v1" else \
            tree.root / vm["cgroup"]
        if tree.version.value == "v1":
            return int((d / "cpu.cfs_quota_us").read_text()) / int(
                (d / "cpu.cfs_period_us").read_text())
        q, per = (d / "cpu.max").read_text().split()
        return int(q) / int(per)

    def settled() -> Any:
        p = api(env, "/platforms/rich")
        if p["state"] != "running" or not p["vms"] or p["vms"][0]["cgroup"] is None:
            return None
        vm = p["vms"][0]
        return vm if abs(quota(vm) - max(vm["allocation"]["cpu"], 0.01)) < 0.011 else None

    vm = wait(settled)
    assert vm["cgroup"].startswith(svc.config.backend.cgroup_prefix + "/rich/")
    # The poor platform pays the reserve price for a few periods, then is shut down.
    p = wait(lambda: (s := api(env, "/platforms/poor"))["state"] == "stopped" and s, 30)
    # (the platform's one budget rule, as in the simulator: keep_alive periods unpaid)
    assert p["reason"] == "could not pay the reserve price for 3 periods" and p["vms"] == []
    assert p["outcome"] == "stopped: could not pay the reserve price for 3 periods"
    assert svc.store.ledger.audit().ok


def test_bench_service_prints_its_figures() -> None:
    r = cli("bench", "service", "--platforms", "2", "--vms", "2", "--periods", "2",
            "--seconds", "0.5", "--clients", "1")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["vms"] == 4 and out["periods"] == 2
    assert out["period_ms"] > 0 and out["prices_rps"] > 0 and out["rss_mib"] > 0
    assert out["server_cpu_ms_per_request"] > 0


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_sigkill_and_restart_resumes_the_platform_and_loses_no_money(
        cpu_heavy: int, tmp_path: Path) -> None:
    """The server is killed (SIGKILL) while a platform runs: its VM outlives it (its own
    session); the restarted server finds the VM's cgroup and re-adopts the **same process**
    (same pid, same cgroup, its quota written again), admits the platform again under a new
    controller with the money its account still holds (no refund, no second budget), the
    period counter continues and the bank's audit balances. An orphan cgroup (no platform)
    of this server (its identity in its environment) is destroyed."""
    import signal

    from merkat.service.config import server_identity

    key = cli("user", "add", "alice", "--budget", "100", "--data-dir", str(tmp_path),
              "--parsable").stdout.strip()
    port = free_port()
    prefix = f"merkat-crash-{uuid.uuid4().hex[:8]}"
    (tmp_path / "server.yaml").write_text(
        f"port: {port}\nperiod: 0.5\nadmission: 0.25\nbackend: {{cgroup_prefix: {prefix}}}\n")
    args = ["server", "--config", str(tmp_path / "server.yaml"), "--data-dir", str(tmp_path)]
    env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{port}", "MERKAT_TOKEN": key}

    def start() -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-m", "merkat", *args], env=ENV, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        wait(lambda: _up(env), 60)
        return p

    server = start()
    orphan = None
    try:
        (tmp_path / "spin.yaml").write_text(SPIN.format(name="spin", budget=30))
        assert cli("submit", str(tmp_path / "spin.yaml"), env=env).returncode == 0
        wait(lambda: (s := api(env, "/platforms/spin"))["state"] == "running" and s["vms"])
        before = api(env, "/prices")["period"]
        (vm,) = api(env, "/platforms/spin")["vms"]
        pid = vm["pid"]
        server.send_signal(signal.SIGKILL)
        server.wait()
        os.kill(pid, 0)  # the VM outlived its server
        held = {a["name"]: a["balance"] for a in api_db(tmp_path)}
        # an orphan: a VM cgroup of no platform, with a live process in it
        cpu = Path("/sys/fs/cgroup/cpu") / prefix
        (cpu / "ghost" / "vm1").mkdir(parents=True)
        orphan = subprocess.Popen(["sleep", "600"], start_new_session=True,  # ours: its identity
                                  env={**ENV, "MERKAT_SERVER": server_identity(tmp_path)})
        (cpu / "ghost" / "vm1" / "cgroup.procs").write_text(str(orphan.pid))
        server = start()
        assert orphan.wait(timeout=10) == -signal.SIGKILL or orphan.returncode < 0
        assert not (cpu / "ghost").exists()  # the orphan destroyed, its group removed
        # re-adopted: the same process in the same cgroup, the platform running, its quota
        # written again
        (again,) = api(env, "/platforms/spin")["vms"]
        assert (again["id"], again["pid"], again["cgroup"]) == (vm["id"], pid, vm["cgroup"])
        assert again["state"] == "running" and again["process"] == "running"
        assert pid in [int(x) for x in (cpu.parent / vm["cgroup"] / "cgroup.procs")
                       .read_text().split()]
        assert api(env, "/platforms/spin")["state"] == "running"
        log = tmp_path / "logs" / "spin" / "vm1.log"
        n = log.read_text().count("iteration")
        wait(lambda: log.read_text().count("iteration") > n)  # it goes on working
        acc = {a["name"]: a["balance"] for a in api(env, "/accounts")["items"]}
        assert acc["alice"] == held["alice"] == "70"  # nothing refunded, no second budget
        assert 0 < float(acc["app:spin"]) <= float(held["app:spin"])
        wait(lambda: (api(env, "/prices")["period"] or 0) > before)  # the counter continues
        recovery = [e["message"] for e in api(env, "/events?limit=1000")["items"]
                    if e["kind"] == "recovery"]
        assert any("1 VM(s) re-adopted (0 frozen), 0 started again" in m for m in recovery)
        os.kill(pid, 0)
    finally:
        server.send_signal(signal.SIGTERM)
        _, err = server.communicate(timeout=30)
        if orphan is not None and orphan.poll() is None:
            orphan.kill()
    # SIGTERM is how a service is stopped: a clean stop, exit 0, no error line
    assert server.returncode == 0, err[-2000:]
    assert "error:" not in err and err.rstrip().endswith("stopped")
    from merkat.service.db import open_store

    store = open_store(f"sqlite:///{tmp_path / 'merkat.db'}")
    assert store.ledger.audit().ok
    assert not (Path("/sys/fs/cgroup/cpu") / prefix / "spin").exists()
    assert not pid_alive(pid)  # the server's shutdown destroyed the VM


def api_db(data_dir: Path) -> list[dict[str, str]]:
    """The accounts as the database holds them (the server is down)."""
    from merkat.bank.money import format_amount
    from merkat.service.db import open_store

    store = open_store(f"sqlite:///{data_dir / 'merkat.db'}")
    return [{"name": a.name, "balance": format_amount(store.ledger.balance(a.name))}
            for a in store.ledger.accounts()]


def _up(env: dict[str, str]) -> bool:
    try:
        api(env, "/health")
    except OSError:
        return False
    return True


def test_a_taken_port_is_one_line_and_exit_1(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = cli("server", "--port", str(port), "--data-dir", str(tmp_path),
                "--config", str(tmp_path / "none.yaml"))
        assert r.returncode == 2 and "cannot read config" in r.stderr  # bad input first
        r = cli("server", "--port", str(port), "--data-dir", str(tmp_path / "new"))
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == \
        f"error: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert not (tmp_path / "new").exists()  # a failed start leaves no database behind


def test_a_second_server_on_one_data_dir_is_refused(tmp_path: Path) -> None:
    """One server per data directory: the second is refused in one line naming the first's
    pid (exit 1), and the first goes on serving; once it has stopped, the directory is free."""
    import signal

    key = cli("user", "add", "alice", "--data-dir", str(tmp_path), "--parsable").stdout.strip()
    port = free_port()
    env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{port}", "MERKAT_TOKEN": key}
    backend = ["--config", str(tmp_path / "s.yaml")]
    (tmp_path / "s.yaml").write_text(f"backend: {{cgroup_root: {tmp_path / 'no-cgroups'}}}\n")
    first = subprocess.Popen([sys.executable, "-m", "merkat", "server", "--port", str(port),
                              "--data-dir", str(tmp_path), *backend], env=ENV, cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait(lambda: _up(env), 60)
        r = cli("server", "--port", "0", "--data-dir", str(tmp_path), *backend)
        assert r.returncode == 1
        assert r.stderr.strip().splitlines()[-1] == (
            f"error: another merkat server (pid {first.pid}) is running on the data directory "
            f"{tmp_path}; stop it, or give this one its own --data-dir")
        assert _up(env)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(30)
    from merkat.service.config import load_config
    from merkat.service.server import Service

    svc = Service(load_config(None, data_dir=tmp_path, port=0,
                              backend={"cgroup_root": str(tmp_path / "no-cgroups")}))
    svc.shutdown()  # the lock was free again
