"""schemathesis over the published OpenAPI document against a real server on loopback, as a
user and as an admin: no 5xx, every status documented, every body valid against its schema,
every content type documented.

The server runs with a period and an admission interval of an hour: the platforms the fuzzer
submits stay queued, so none of its generated commands ever runs. The event stream (an
endless response) is left out; tests/test_hostile_http.py reads it. A longer run by hand is
recorded in docs/service.md ("Fuzzing")."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
EXAMPLES = 10  # per operation and role: ~140 requests each


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def merkat(*args: str) -> str:
    r = subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True, text=True,
                       env=ENV, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str]]]:
    d = tmp_path_factory.mktemp("fuzz")
    keys = {"alice": merkat("user", "add", "alice", "--budget", "1000", "--data-dir", str(d),
                            "--parsable"),
            "root": merkat("user", "add", "root", "--admin", "--data-dir", str(d), "--parsable")}
    port = free_port()
    err = open(d / "server.err", "w")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "merkat", "server", "--data-dir", str(d),
                             "--port", str(port), "--period", "3600", "--admission", "3600"],
                            env=ENV, stdout=subprocess.DEVNULL, stderr=err, cwd=d)
    url = f"http://127.0.0.1:{port}"
    try:
        end = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{url}/api/v1/health", timeout=2).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < end, (
                    d / "server.err").read_text()
                time.sleep(0.2)
        yield url, keys
    finally:
        proc.terminate()
        proc.wait(30)
        err.close()
    log = (d / "server.err").read_text()
    assert "Traceback" not in log, log[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("role", ["alice", "root"])
def test_no_request_the_document_allows_breaks_the_server(
        server: tuple[str, dict[str, str]], role: str, tmp_path: Path) -> None:
    url, keys = server
    st = shutil.which("schemathesis", path=str(Path(sys.executable).parent)) or "schemathesis"
    key = keys[role]
    r = subprocess.run(
        [st, "run", f"{url}/api/v1/openapi.json", "-H", f"Authorization: Bearer {key}",
         "-H", f"X-API-Key: {key}", "-n", str(EXAMPLES), "--phases", "fuzzing",
         "--exclude-path", "/api/v1/events/stream", "--checks", CHECKS, "--seed", "25",
         "--no-color", "-w", "1", "--generation-database", "none", "--request-timeout", "20"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    found = re.search(r"(\d+) generated, (\d+) passed", out)
    assert found is not None, out[-3000:]
    assert int(found.group(1)) == int(found.group(2)) >= 100, found.group(0)
