"""Hostile kubeconfigs and API servers that are not one (the Kubernetes backend's credentials,
backends/kubernetes/connect.py and kubeauth.py): every one is one line — exit 2 for a kubeconfig
that cannot work, exit 1 for a cluster that does not answer as one — and in the server a period
that reports it (op ``refresh``), never an internal error, never a wait without end."""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from merkat.backends.kubernetes import kubeauth
from merkat.backends.kubernetes.connect import KubeConfigError, connect
from merkat.backends.kubernetes.objects import ApiFailure
from merkat.core.backend import Plan
from test_kubernetes_cli import merkat

pytestmark = pytest.mark.kubernetes



def kubeconfig(path: Path, server: str = "http://127.0.0.1:1", user: Any = None,
               cluster: dict[str, Any] | None = None) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [{"name": "k", "cluster": {"server": server, **(cluster or {})}}],
        "users": [{"name": "u", "user": user if user is not None else {"token": "t"}}]}))
    return path


def plugin(command: str, *args: str, version: str = "client.authentication.k8s.io/v1beta1",
           ) -> dict[str, Any]:
    return {"exec": {"apiVersion": version, "command": command, "args": list(args)}}


@pytest.fixture
def answer() -> Iterator[tuple[str, dict[str, Any]]]:
    """An HTTP server that is not an API server: it answers every GET with ``reply``'s
    status, headers and body."""
    reply: dict[str, Any] = {"status": 404, "headers": {}, "body": b""}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response_only(reply["status"])
            for k, v in reply["headers"].items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(reply["body"])))
            self.end_headers()
            self.wfile.write(reply["body"])

        def log_message(self, *a: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", reply
    finally:
        server.shutdown()
        server.server_close()


NOT_ONE = "not a kubeconfig (clusters, contexts, users)"


@pytest.mark.parametrize("content, error", [
    ("", NOT_ONE),  # was "AttributeError: 'NoneType' object has no attribute 'get'"
    ("[1, 2]\n", NOT_ONE),
    ("apiVersion: v1\ncurrent-context: x\n", f"{NOT_ONE} (no 'clusters')"),  # KeyError: ...
    (b"\xa3\x00\xff", "not a text file (YAML)"),  # was UnicodeDecodeError: 'utf-8' codec...
])
def test_a_file_that_is_no_kubeconfig_is_one_line_exit_2(
        tmp_path: Path, content: str | bytes, error: str) -> None:
    f = tmp_path / "kc"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(f))
    assert (r.returncode, r.stderr) == (2, f"error: kubeconfig {f}: {error}\n")


def test_files_it_names_missing_and_an_unknown_plugin_version_exit_2(tmp_path: Path) -> None:
    f = kubeconfig(tmp_path / "ca", cluster={"certificate-authority": "/nonexistent/ca.crt"})
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(f))  # was 'error: No such file...'
    assert (r.returncode, r.stderr) == (2, f"error: kubeconfig {f}: certificate-authority "
                                           "/nonexistent/ca.crt: no such file\n")
    f = kubeconfig(tmp_path / "v9", user=plugin("/bin/true", version="v9"))
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(f))  # was an internal error, exit 1
    assert r.returncode == 2 and r.stderr.startswith(
        "error: kubeconfig: exec plugin /bin/true: apiVersion 'v9' is not one of"), r.stderr


@pytest.mark.parametrize("user, error", [
    (plugin("/nonexistent-plugin"), "/nonexistent-plugin: No such file or directory"),
    (plugin("/bin/sh", "-c", "echo denied >&2; exit 3"), "/bin/sh: exit status 3: denied"),
    (plugin("/bin/echo", "not json"), "/bin/echo: did not print an ExecCredential with a "
                                      "status.token"),
])
def test_an_exec_plugin_that_fails_is_one_line(tmp_path: Path, user: Any, error: str) -> None:
    """Was 'ConfigError: Exec /bin/sh returned 3: (an internal error...)', 'Expecting value:
    line 1 column 1 (char 0)'."""
    f = kubeconfig(tmp_path / "kc", user=user)
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(f))
    assert (r.returncode, r.stderr) == (
        1, f"error: Kubernetes API: kubeconfig exec plugin {error}\n"), r.stderr


def test_an_exec_plugin_that_waits_for_ever_is_cut(tmp_path: Path, monkeypatch: Any) -> None:
    """A plugin waiting for a login held the first call, and the server's period loop with it,
    for ever (lightkube runs it without a time limit)."""
    monkeypatch.setattr(kubeauth, "PLUGIN_TIMEOUT_S", 1.0)
    b = connect(str(kubeconfig(tmp_path / "kc", user=plugin("/bin/sleep", "100"))))
    t0 = time.monotonic()
    report = b.apply_report(Plan(0.0, 40.0))
    assert time.monotonic() - t0 < 10
    assert [(r.op, r.error) for r in report.ops] == [(
        "refresh", "kubeconfig exec plugin /bin/sleep: no answer in 1 s (killed; does it wait "
                   "for a login?)")]
    # The token is asked again at the next period (a login may have happened meanwhile).
    assert b.apply_report(Plan(40.0, 40.0)).ops[0].op == "refresh"


@pytest.mark.parametrize("status, headers, body, said", [
    (404, {}, b"", "404 Not Found: not an answer of the Kubernetes API (no content type)"),
    (502, {"Content-Type": "text/html"}, b"<html>\n<h1>Bad Gateway</h1>\n</html>",
     "502 Bad Gateway: not an answer of the Kubernetes API (text/html): </html>"),
    (200, {"Content-Type": "text/html; charset=utf-8"}, b"<p>Log in to the Wi-Fi</p>",
     "200 OK: not an answer of the Kubernetes API (text/html): <p>Log in to the Wi-Fi</p>"),
    (500, {"Content-Type": "application/json"}, b"oops",
     "500 Internal Server Error: not an answer of the Kubernetes API (application/json): oops"),
])
def test_a_server_that_is_no_api_server_is_one_line(
        answer: tuple[str, dict[str, Any]], tmp_path: Path, status: int,
        headers: dict[str, str], body: bytes, said: str) -> None:
    """Was "KeyError: 'Content-Type' (an internal error...)" (and for the server 'cannot start
    the server: 'Content-Type''), an HTTPStatusError, a JSON decoding error."""
    url, reply = answer
    reply.update(status=status, headers=headers, body=body)
    f = kubeconfig(tmp_path / "kc", server=url)
    r = merkat("kubernetes", "nodes", "--kubeconfig", str(f))
    assert (r.returncode, r.stderr) == (1, f"error: Kubernetes API: {said} from 127.0.0.1\n")


def test_a_period_against_a_proxy_page_reports_refresh(
        answer: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    url, reply = answer
    reply.update(status=503, headers={"Content-Type": "text/html"}, body=b"busy")
    b = connect(str(kubeconfig(tmp_path / "kc", server=url)), backoff_s=0.0)
    report = b.apply_report(Plan(0.0, 40.0))  # (an HTTPStatusError failed the period)
    assert [(r.op, r.error) for r in report.ops] == [("refresh", "503 Service Unavailable: not "
                                                      "an answer of the Kubernetes API "
                                                      "(text/html): busy from 127.0.0.1")]
    assert report.api_calls == 1 + b.retries  # a 503 is retried as the API server's


def test_kubeconfig_errors_are_value_errors() -> None:
    with pytest.raises(KubeConfigError, match="Configuration file /nonexistent not found"):
        connect("/nonexistent")
    assert issubclass(KubeConfigError, ValueError) and issubclass(ApiFailure, Exception)
