"""User-supplied monitors cannot hurt the service (issue 25): a catastrophic regex costs
linear time and never stalls another user's requests; a command monitor that hangs is killed
at its limit and reported once; a command monitor runs as its owner, in the VM's cgroup,
without the server's environment."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse
from merkat.web.app import create_app
from test_hostile_loop_support import SLEEPER, Loop, manager_fixture, wait  # noqa: F401

REDOS = """\
name: redos
controller: {policy: best-effort}
budget: 50
clusters:
  - name: main
    command: "for i in 1 2 3; do printf '%s!\\\\n' aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa; done;
      sleep 60"
    cpu: 1
    memory: 64
    monitor: {kind: log, regex: '(a+)+$'}
"""


def test_a_catastrophic_regex_costs_linear_time() -> None:
    from merkat.service.monitors import match_log

    text = ("a" * 5000 + "!\n") * 13  # 64 KiB where a backtracking engine takes forever
    t = time.perf_counter()
    assert match_log(text, r"(a+)+$") == {}
    assert match_log(text + "iteration 7/9", r"(a+)+$|iteration (?P<work_done>\d+)") == {
        "work_done": 7.0}
    assert time.perf_counter() - t < 0.5


def test_a_redos_monitor_never_stalls_another_users_requests(
        manager: Manager) -> None:
    m = manager
    bob = m.store.add_user("bob", budget=100_000_000)
    m.submit("bob", parse(REDOS))
    # and a command monitor that hangs until it is killed at its limit
    m.submit("bob", parse(SLOW_MONITOR))
    m.submit("alice", parse(SLEEPER))
    alice = m.store.new_key("alice")
    auth = {"Authorization": f"Bearer {alice}"}
    with TestClient(create_app(m)) as c:
        loop = Loop(m)
        try:
            wait(lambda: m.store.platform("redos").state == "running"  # type: ignore[union-attr]
                 and m.store.platform("s").state == "running")  # type: ignore[union-attr]
            log = Path(m.backend.log_path("redos/vm1") or "")
            wait(lambda: log.exists() and log.read_text().count("!") == 3)
            n = len(m.store.prices())
            worst = 0.0
            end = time.monotonic() + 2.5  # five periods of the monitor reading that log
            while time.monotonic() < end:
                for path in ("/api/v1/platforms", "/api/v1/prices"):
                    t = time.monotonic()
                    r = c.get(path, headers=auth)
                    worst = max(worst, time.monotonic() - t)
                    assert r.status_code == 200
                time.sleep(0.05)
            t = time.monotonic()
            r = c.post("/api/v1/platforms/s/stop", headers=auth)
            assert r.status_code == 200 and time.monotonic() - t < 1.0
            assert worst < 1.0
            wait(lambda: len(m.store.prices()) >= n + 3)  # the periods go on
            assert c.get("/api/v1/health").status_code == 200
            assert c.get("/api/v1/platforms/redos",
                         headers={"Authorization": f"Bearer {bob}"}).json()["state"] == "running"
        finally:
            loop.close()


SLOW_MONITOR = """\
name: slow
controller: {policy: best-effort}
budget: 50
poll: 1
clusters:
  - name: main
    command: sleep 60
    cpu: 1
    memory: 64
    monitor: {kind: command, command: "echo work_done=1; exec sleep 31.4159"}
"""


def _sleepers(marker: str) -> list[str]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if marker in cmd:
                out.append(d.name)
    return out


def test_a_command_monitor_that_hangs_is_killed_at_its_limit_and_is_an_event(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    from merkat.service import probes

    monkeypatch.setattr(probes, "TIMEOUT", 2.5)
    m = manager
    m.submit("alice", parse(SLOW_MONITOR))
    m.admit()
    took = []
    end = time.monotonic() + 6.5  # two readings killed at their limit, and a third started
    while time.monotonic() < end:
        t = time.monotonic()
        m.tick()
        took.append(time.monotonic() - t)
        time.sleep(0.3)
    # a period waits for monitors at most a quarter period (here 0.125 s), never their limit
    assert max(took) < 1.5, took
    events = [e for e in m.store.events(limit=1000) if e["kind"] == "monitor-timeout"]
    assert [e["message"] for e in events] == [
        "monitor of slow: timed out after 2.5 s (killed)"]  # once, not every reading
    assert m.live["slow"].tracker.metrics().work_done == 0.0
    wait(lambda: not _sleepers("31.4159"), timeout=5)  # its process group was killed
    assert m.store.platform("slow").state == "running"  # type: ignore[union-attr]


def test_poll_has_a_lower_bound_at_submit() -> None:
    from merkat.service.templates import TemplateError

    with pytest.raises(TemplateError, match="poll: Input should be greater than or equal to 1"):
        parse(SLOW_MONITOR.replace("poll: 1", "poll: 0.05"))


@pytest.mark.root
def test_a_command_monitor_runs_in_the_vms_cgroup_without_the_servers_environment(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os
    import uuid

    if os.geteuid() != 0:
        pytest.skip("needs root (real cgroups)")
    monkeypatch.setenv("MERKAT_TEST_SERVER_SECRET", "hunter2")
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-mon-{uuid.uuid4().hex[:8]}"})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    try:
        if not m.backend.enforced:
            pytest.skip("cgroups not writable")
        text = SLOW_MONITOR.replace(
            "echo work_done=1; exec sleep 31.4159",
            "cat /proc/self/cgroup > mon.cgroup; env > mon.env; echo work_done=5")
        m.submit("alice", parse(text))
        m.admit()
        for _ in range(6):
            m.tick()
            if m.live["slow"].tracker.metrics().work_done == 5.0:
                break
            time.sleep(0.3)
        assert m.live["slow"].tracker.metrics().work_done == 5.0
        alice = m.tenants.identity("alice")  # the VM's directory, in its owner's area
        wd = alice.home / "work" / "slow" / "main-0"
        assert (wd / "mon.env").stat().st_uid == alice.uid != 0  # run as her, not root
        groups = (wd / "mon.cgroup").read_text()
        vm_group = f"/{cfg.backend.cgroup_prefix}/slow/vm1"
        assert any(line.endswith(vm_group) for line in groups.splitlines()
                   if ":cpu:" in line or line.startswith("0::")), groups
        env = (wd / "mon.env").read_text()
        assert "MERKAT_VM=slow/vm1" in env
        assert "hunter2" not in env and "MERKAT_TEST_SERVER_SECRET" not in env
    finally:
        m.close()
    # nothing left under the prefix (the platform's plugins group included)
    assert not any(d.exists() for d in m.backend.tree.dirs("").values())


def test_a_log_path_swapped_for_a_link_after_its_check_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A log monitor's ``path`` is resolved and checked to be in the VM's working directory,
    then read by the server (root). Read by name, a directory of the path that the tenant
    swapped for a link to ``/etc`` in between (her VM can loop on it) made the server read
    ``/etc/shadow`` through her regex. Now the resolved path is opened without following a
    link: the swap fails the read."""
    from merkat.service import probes
    from merkat.service.templates import Monitor

    cwd, secret = tmp_path / "work" / "main-0", tmp_path / "etc"
    (cwd / "d").mkdir(parents=True)
    secret.mkdir()
    (cwd / "d" / "progress.log").write_text("iteration 1/9\n")
    (secret / "progress.log").write_text("iteration 42/43\n")  # what she may not read
    mon = Monitor(kind="log", regex=r"iteration (?P<work_done>\d+)/(?P<work_total>\d+)",
                  path="d/progress.log")
    probe = probes.Probe("p", "alice", mon, "p/vm1", cwd=str(cwd))
    assert probes.take_reading(None, probe).values == {"work_done": 1.0, "work_total": 9.0}
    checked = probes.inside

    def then_swap(base: str | None, path: str) -> str | None:
        found = checked(base, path)
        (cwd / "d").rename(cwd / "d.old")
        (cwd / "d").symlink_to(secret)
        return found

    monkeypatch.setattr(probes, "inside", then_swap)
    assert probes.take_reading(None, probe).values == {}
