"""What lightkube's client leaves to chance, made data (docs/kubernetes.md, "Credentials"):

- **exec credential plugins** (``users[].user.exec``: ``aws eks get-token``,
  ``gke-gcloud-auth-plugin``, ``kubelogin``): lightkube runs the plugin with no time limit and
  its terminal's stdin, so a plugin that waits (a login prompt, a browser, a network that does
  not answer) held the server's period loop — every user's — for ever, and a plugin that failed
  raised ``ConfigError``, ``KeyError`` or ``JSONDecodeError`` through the loop. :class:`ExecPluginAuth`
  runs it with stdin at end-of-file, at most :data:`PLUGIN_TIMEOUT_S`, and reports any failure
  as :class:`~merkat.backends.kubernetes.objects.ApiFailure` (code 0: the server was not asked);
- **answers that are not the API server's** (a proxy's or load balancer's page, a URL that is
  not a Kubernetes API): an error without a ``Content-Type`` made lightkube raise
  ``KeyError: 'Content-Type'``, an HTML one an ``HTTPStatusError`` the backend did not expect,
  a page served with 200 a decoding error. :func:`check_answer` (a response hook) turns them
  into an ``ApiFailure`` with the status, the content type and the body's first line.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Generator
from typing import Any

import httpx2

from merkat.backends.kubernetes.objects import ApiFailure

PLUGIN_TIMEOUT_S = 30.0  # an exec credential plugin's time at most, per run
PLUGIN_OUTPUT_MAX = 1 << 20  # bytes of its output read at most (an ExecCredential is small)
PLUGIN_VERSIONS = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1",
                   "client.authentication.k8s.io/v1alpha1")


def _first_line(data: bytes | str, limit: int = 200) -> str:
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else ""
    return "".join(ch if ch.isprintable() else "?" for ch in line[:limit])


class ExecPluginAuth(httpx2.Auth):
    """A kubeconfig's exec plugin as lightkube's ``ExecAuth`` (its token kept until a 401),
    bounded and with its failures as :class:`ApiFailure` (module doc)."""

    def __init__(self, plugin: Any, timeout: float | None = None) -> None:
        self.command = [str(plugin.command), *(str(a) for a in plugin.args or ())]
        self.env = {**os.environ, **{str(v.name): str(v.value) for v in plugin.env or ()}}
        self.timeout = PLUGIN_TIMEOUT_S if timeout is None else timeout
        self._bearer: str | None = None

    def _fail(self, why: str) -> ApiFailure:
        return ApiFailure(0, f"kubeconfig exec plugin {self.command[0]}: {why}")

    def token(self) -> str:
        """Run the plugin once; its ``status.token``."""
        try:
            proc = subprocess.Popen(self.command, env=self.env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    start_new_session=True)
        except (OSError, ValueError) as e:
            raise self._fail(getattr(e, "strerror", None) or str(e)) from None
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise self._fail(f"no answer in {self.timeout:g} s (killed; does it wait for a "
                             "login?)") from None
        if proc.returncode != 0:
            last = _first_line(err)
            raise self._fail(f"exit status {proc.returncode}" + (f": {last}" if last else ""))
        try:
            token = json.loads(out[:PLUGIN_OUTPUT_MAX])["status"]["token"]
        except (ValueError, KeyError, TypeError):
            token = None
        if not isinstance(token, str) or not token or not token.isprintable():
            raise self._fail("did not print an ExecCredential with a status.token")
        return token

    def sync_auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request,
                                                                  httpx2.Response, None]:
        if self._bearer:
            request.headers["Authorization"] = self._bearer
            response = yield request
            if response.status_code != 401:
                return
        self._bearer = f"Bearer {self.token()}"
        request.headers["Authorization"] = self._bearer
        yield request


def check_answer(response: httpx2.Response) -> None:
    """A response hook: an answer that cannot be the API server's is an :class:`ApiFailure`
    with its status (module doc). The API server's errors are ``Status`` objects in JSON; its
    answers are never HTML."""
    kind = response.headers.get("Content-Type", "")
    base = kind.split(";")[0].strip().lower()
    code = response.status_code
    if code < 400 and base != "text/html":
        return
    if code >= 400 and base == "application/json":
        response.read()
        try:
            body = json.loads(response.content)
        except ValueError:
            body = None
        if isinstance(body, dict) and body.get("kind") == "Status":
            return  # lightkube's ApiError: the backend's retries and messages
    response.read()
    first = _first_line(response.content)
    what = f"{code} {response.reason_phrase}".strip()
    raise ApiFailure(code if code >= 400 else 502,
                     f"{what}: not an answer of the Kubernetes API ({base or 'no content type'})"
                     + (f": {first}" if first else "") + f" from {response.request.url.host}")


def harden(client: Any) -> None:
    """Give a lightkube ``Client`` the bounded exec plugin and the answer check (module doc).
    lightkube has no public way to set its httpx2 client's auth or hooks: its ``_client``."""
    http = client._client._client
    http.event_hooks["response"] = [*http.event_hooks["response"], check_answer]
    user = client.config.user
    if user is not None and user.exec is not None and user.token is None \
            and user.token_file is None:
        http.auth = ExecPluginAuth(user.exec)
