"""Two servers on one machine, each with its default settings (issue 26): each owns its cgroup
subtree (``merkat-<identity of its data dir>``), so a SIGKILL and restart of either never
touches the other's VM: the same pid, still making progress. Root and real cgroups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.local import pid_alive
from merkat.backends.local.cgroups import detect
from merkat.service.config import server_identity
from test_service_e2e import ENV, LIGHT_SPIN, ROOT, _up, api, cli, free_port, wait

pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.skipif(
    os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None, reason="needs root and cgroups")]


class Server:
    """``merkat server`` on its own data directory and port, with default settings."""

    def __init__(self, data: Path) -> None:
        self.data = data
        self.port = free_port()
        key = cli("user", "add", "alice", "--budget", "100", "--data-dir", str(data),
                  "--parsable").stdout.strip()
        self.env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{self.port}", "MERKAT_TOKEN": key}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "merkat", "server", "--data-dir", str(self.data), "--port",
             str(self.port), "--period", "0.5", "--admission", "0.25"], env=ENV, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait(lambda: _up(self.env), 60)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(30)

    def vm(self) -> dict[str, Any]:
        (vm,) = wait(lambda: (s := api(self.env, "/platforms/spin"))["state"] == "running"
                     and s["vms"] and s["vms"][0]["pid"] and s["vms"])
        return dict(vm)

    def progress(self) -> int:
        return (self.data / "logs" / "spin" / "vm1.log").read_text().count("iteration")


def test_two_servers_keep_each_others_vms_across_a_sigkill_and_restart(
        cpu_heavy: int, tmp_path: Path) -> None:
    a, b = Server(tmp_path / "a"), Server(tmp_path / "b")
    try:
        for s in (a, b):
            s.start()
            (s.data / "spin.yaml").write_text(LIGHT_SPIN.format(name="spin", budget=30))
            assert cli("submit", str(s.data / "spin.yaml"), env=s.env).returncode == 0
        vms = {s: s.vm() for s in (a, b)}
        for s in (a, b):  # each in its own subtree, named after its data directory
            assert vms[s]["cgroup"] == f"merkat-{server_identity(s.data)}/spin/vm1"
        for victim, other in ((a, b), (b, a)):
            victim.kill()
            victim.start()
            # the victim's VM re-adopted, the other's untouched: same pids, both working
            for s in (victim, other):
                again = s.vm()
                assert (again["pid"], again["cgroup"]) == (vms[s]["pid"], vms[s]["cgroup"])
                assert pid_alive(again["pid"])
            n = other.progress()
            wait(lambda o=other, k=n: o.progress() > k)  # type: ignore[misc]
            events = [e["message"] for e in api(victim.env, "/events?limit=1000")["items"]]
            assert not any("destroyed" in m for m in events)
    finally:
        for s in (a, b):
            s.stop()
    for s in (a, b):  # a clean stop destroys the server's own VMs and subtree
        assert not pid_alive(vms[s]["pid"])
        assert not (Path("/sys/fs/cgroup/cpu") / f"merkat-{server_identity(s.data)}").exists()
