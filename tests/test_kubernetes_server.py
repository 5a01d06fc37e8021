"""`merkat server --backend kubernetes --kubeconfig FILE --namespace NS` end to end: the real
server (uvicorn, period loop, bank) in its own process drives the emulated cluster served over
HTTP; platforms submitted with the CLI become pods bound to nodes, whose specs hold the
allocations `merkat platform show` reports; killed with SIGKILL and started again, the server
re-adopts the same pods."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from merkat.backends.kubernetes.emulator import KubeEmulator, kubeconfig
from merkat.backends.kubernetes.emulator_http import serve
from merkat.backends.kubernetes.objects import cores_to_millis, cpu_millis
from test_service_e2e import ENV, ROOT, _up, api, cli, free_port  # the service's e2e helpers
from test_service_e2e import wait as _wait

pytestmark = pytest.mark.kubernetes

SPIN = """\
name: {name}
controller: {{policy: best-effort}}
budget: {budget}
clusters:
  - name: main
    command: python -m merkat.examples.solver --iterations 1000 --cost 0.05
    cpu: 2
    memory: 96
    min_memory: 32
"""


def wait(cond: Any, timeout: float = 60.0) -> Any:
    return _wait(cond, timeout)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[KubeEmulator, Any, Path]]:
    emu = KubeEmulator(record=False)
    emu.namespaces.add("team")
    emu.add_node("node-0", "2", "4Gi")
    emu.add_node("node-1", "2", "4Gi")
    server = serve(emu.handle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "kubeconfig"
    config.write_text(yaml.safe_dump(kubeconfig("default", server.url)))
    try:
        yield emu, server, config
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.slow  # a server process and a dozen CLI processes
def test_merkat_server_on_the_emulated_cluster(cluster: Any, tmp_path: Path) -> None:
    emu, http, config = cluster
    key = cli("user", "add", "alice", "--budget", "100", "--data-dir", str(tmp_path),
              "--parsable").stdout.strip()
    assert key.startswith("mk_")
    port = free_port()

    def server() -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "merkat", "server", "--backend", "kubernetes", "--kubeconfig",
             str(config), "--namespace", "team", "--data-dir", str(tmp_path), "--port",
             str(port), "--period", "0.5", "--admission", "0.25"],
            env=ENV, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    proc = server()
    env = {**ENV, "MERKAT_URL": f"http://127.0.0.1:{port}", "MERKAT_TOKEN": key}
    try:
        wait(lambda: _up(env))  # polled through the API: a CLI process per poll costs ~0.5 s
        nodes = wait(lambda: (r := cli("nodes", "-o", "json", env=env)).returncode == 0
                     and json.loads(r.stdout)["items"])
        assert [n["name"] for n in nodes] == ["node-0", "node-1"]
        for name in ("spin-a", "spin-b", "spin-c"):
            f = tmp_path / f"{name}.yaml"
            f.write_text(SPIN.format(name=name, budget=20))
            r = cli("submit", str(f), "--parsable", env=env)
            assert r.returncode == 0, r.stderr

        def pods() -> dict[str, dict[str, Any]]:
            with http.lock:
                return {p["metadata"]["annotations"]["merkat.io/vm"]: json.loads(json.dumps(p))
                        for p in emu.pods.values()}

        wait(lambda: len(pods()) == 3)
        seen = pods()
        assert {p["metadata"]["namespace"] for p in seen.values()} == {"team"}
        assert {p["metadata"]["labels"]["merkat.io/platform"] for p in seen.values()} == {
            "spin-a", "spin-b", "spin-c"}
        (c,) = seen["spin-a/vm1"]["spec"]["containers"]
        assert c["image"] == "python:3.12-slim"
        assert c["command"][:2] == ["/bin/sh", "-c"] and "merkat.examples.solver" in c["command"][2]

        # What `merkat platform show` reports is what the pod's spec holds (poll until a period
        # boundary does not fall between the two reads): polled through the API until it
        # holds, then read through the CLI.
        def consistent(via_cli: bool = True) -> bool:
            for name in ("spin-a", "spin-b", "spin-c"):
                if via_cli:
                    r = cli("platform", "show", name, "-o", "json", env=env)
                    vms = json.loads(r.stdout)["vms"]
                else:
                    vms = api(env, f"/platforms/{name}")["vms"]
                spec = pods()[vms[0]["id"]]["spec"]
                limits = spec["containers"][0]["resources"]["limits"]
                if cpu_millis(limits["cpu"]) != cores_to_millis(vms[0]["allocation"]["cpu"]):
                    return False
                if vms[0]["node"] != spec["nodeName"]:
                    return False
            return True

        wait(lambda: consistent(via_cli=False))
        wait(consistent)
        # Three 2-core platforms on two 2-core nodes: the market shares a node.
        assert len({p["spec"]["nodeName"] for p in pods().values()}) == 2

        # Killed (SIGKILL) and started again: the same pods are re-adopted (same uid), none
        # deleted or created, and the platforms go on (docs/kubernetes.md, "Restart").
        uids = {vm: p["metadata"]["uid"] for vm, p in pods().items()}
        proc.kill()
        proc.wait()
        proc = server()
        wait(lambda: _up(env))
        shown = wait(lambda: (r := cli("platform", "show", "spin-a", "-o", "json", env=env))
                     .returncode == 0 and json.loads(r.stdout))
        assert shown["state"] == "running" and shown["vms"][0]["adopted"] is True
        assert {vm: p["metadata"]["uid"] for vm, p in pods().items()} == uids
        r = cli("events", "-n", "1000", "-o", "json", env=env)  # 3 charges a period after it
        assert "1 VM(s) re-adopted (0 frozen), 0 started again" in r.stdout
        wait(lambda: consistent(via_cli=False))
        wait(consistent)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    # A graceful stop deletes the server's pods (as the local backend destroys its VMs).
    assert pods() == {}


def test_server_flags_are_checked_in_one_line(tmp_path: Path) -> None:
    r = cli("server", "--backend", "kubernetes", "--kubeconfig", str(tmp_path / "missing"),
            "--data-dir", str(tmp_path), "--port", "0")
    assert r.returncode == 2, r.stderr
    assert "not found" in r.stderr and "Traceback" not in r.stderr
    r = cli("server", "--backend", "kubernetes", "--namespace", "Not_A_Namespace",
            "--data-dir", str(tmp_path), "--port", "0")
    assert r.returncode == 2 and r.stderr.startswith("error: backend.namespace")
    r = cli("server", "--backend", "nomad", "--data-dir", str(tmp_path), "--port", "0")
    assert r.returncode == 2 and "unknown backend 'nomad'" in r.stderr
