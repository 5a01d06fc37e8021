"""``merkat kubernetes emulator`` (the API emulator over HTTP) and ``merkat kubernetes nodes``
against it, as a user runs them: separate processes, a kubeconfig file, real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from merkat.cli import app

pytestmark = pytest.mark.kubernetes

SRC = str(Path(__file__).parent.parent / "src")


def merkat(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def test_nodes_of_the_emulator_served_over_http(tmp_path: Path) -> None:
    config = tmp_path / "emu.kubeconfig"
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.Popen([sys.executable, "-m", "merkat", "kubernetes", "emulator", "--port",
                             "0", "--nodes", "2", "--cores", "8", "--memory", "16Gi",
                             "--kubeconfig", str(config)], stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "Kubernetes API emulator on http://127.0.0.1:" in line, line
        assert config.exists()
        r = merkat("kubernetes", "nodes", "--kubeconfig", str(config), "-o", "json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout) == {"items": [
            {"name": "node-0", "schedulable": True, "cpu": 8.0, "memory": 16384.0, "pods": 0},
            {"name": "node-1", "schedulable": True, "cpu": 8.0, "memory": 16384.0, "pods": 0}]}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    # The emulator is gone: an unreachable API is a one-line runtime failure.
    t0 = time.monotonic()
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(config))
    assert r.returncode == 1 and r.stderr.startswith("error: Kubernetes API:")
    assert "Traceback" not in r.stderr and time.monotonic() - t0 < 60


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(app, ["kubernetes", "nodes", "--kubeconfig", str(tmp_path / "none")])
    assert r.exit_code == 2 and "not found" in r.output
    r = runner.invoke(app, ["kubernetes", "emulator", "--memory", "12x"])
    assert r.exit_code == 2 and "--memory" in r.output
    r = runner.invoke(app, ["kubernetes", "emulator", "--nodes", "0"])
    assert r.exit_code == 2 and "--nodes" in r.output


@pytest.mark.parametrize("namespace", ["a/../..", "x?y=1", "", "Team", "n\u00e9", "a" * 64])
def test_a_namespace_that_is_no_dns_label_is_one_line_exit_2(namespace: str) -> None:
    """'a/../..' listed the pods of every namespace (GET /api/v1/namespaces/a/../../pods),
    'x?y=1' asked for 'x'; the server's backend.namespace was checked already."""
    for command in ("nodes", "emulator"):
        r = CliRunner().invoke(app, ["kubernetes", command, "--namespace", namespace,
                                     "--kubeconfig", "/nonexistent"])
        assert r.exit_code == 2 and "--namespace must be a DNS label" in r.output, r.output
