"""A command run inside a pod through the API's ``pods/{name}/exec`` subresource.

lightkube (>= 1.0) speaks the exec protocol itself: ``Client.exec`` opens ``GET
.../pods/{name}/exec?command=...&stdout=true&stderr=true&stdin=true&container=vm`` as a
WebSocket (subprotocols ``v5.channel.k8s.io``, ``v4.channel.k8s.io``; the API server URL and
credentials of the kubeconfig lightkube resolved), demultiplexes the channels (1 stdout, 2
stderr, 3 the final ``Status``) and reads the exit code from a ``NonZeroExitCode`` status.
:func:`exec_in_pod` wraps it so that whatever happens comes back as data: an
:class:`ExecResult` with stdout, stderr and the exit code, or with ``error`` set (a timeout, the
pod gone or not running, the API server refusing, a broken connection) — never an exception, so
a monitor reading that fails cannot stop the period loop.

Decision: nothing is written to stdin. lightkube always asks for it (``stdin=true``), and
writing it (even only to close it, which ``v5.channel.k8s.io`` allows) races with a command
that ends at once: the server's close can arrive before the client's stdin frame, and the
client then fails with the output already received. So stdin stays an open, empty pipe; the
service's monitors run ``exec </dev/null; COMMAND`` (``KubernetesLive.exec_in``), so a command
that reads its stdin sees end-of-file instead of waiting for the timeout. Both ``v5`` and
``v4`` servers work.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from merkat.backends.kubernetes.objects import CONTAINER


@dataclass(frozen=True)
class ExecResult:
    """What one exec gave: ``exit_code`` None and ``error`` set when the command did not run to
    its end (or its end could not be read)."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None and self.exit_code == 0

    def problem(self) -> str | None:
        """One line saying what went wrong (None when the command exited 0)."""
        if self.error is not None:
            return self.error
        if self.exit_code != 0:
            first = self.stderr.strip().splitlines()[-1:] or [""]
            return f"exit status {self.exit_code}" + (f": {first[0][:200]}" if first[0] else "")
        return None


def exec_in_pod(client: Any, name: str, namespace: str, argv: Sequence[str], *,
                container: str = CONTAINER, timeout: float = 5.0) -> ExecResult:
    """Run ``argv`` in ``container`` of pod ``namespace/name`` (module doc); at most ``timeout``
    seconds waiting for its output."""
    import httpx2
    from httpx2.websockets import HTTPXWSException, WebSocketUpgradeError
    from lightkube import ApiError

    t0 = time.monotonic()

    def failed(reason: str) -> ExecResult:
        return ExecResult(error=reason, seconds=time.monotonic() - t0)

    try:
        r = client.exec(name, namespace=namespace, container=container, command=list(argv),
                        stdout=True, stderr=True, timeout=timeout)
    except WebSocketUpgradeError as e:
        return failed(_upgrade_error(e.response))
    except ApiError as e:  # a Failure status other than NonZeroExitCode
        code = f"{e.status.code} " if e.status.code else ""
        return failed(f"{code}{e.status.reason or 'Failure'}: {e.status.message}".strip())
    except (TimeoutError, httpx2.TimeoutException):
        return failed(f"timed out after {timeout:g} s")
    except (httpx2.HTTPError, HTTPXWSException, OSError) as e:
        return failed(f"{type(e).__name__}: {e}".rstrip(": "))
    except Exception as e:  # a reading must never stop the period loop (module doc)
        return failed(f"{type(e).__name__}: {e}".rstrip(": "))
    return ExecResult(r.stdout or "", r.stderr or "", int(r.exit_code), None,
                      time.monotonic() - t0)


def _upgrade_error(response: Any) -> str:
    """The API server's refusal of the WebSocket upgrade (404 pod gone, 400 not running...), from
    its ``Status`` body when it can still be read."""
    code = response.status_code
    try:
        response.read()
        status = json.loads(response.content)
        return f"{code} {status.get('reason') or ''}: {status.get('message') or ''}".strip()
    except Exception:  # the body of a closed stream, or not JSON: the status line says enough
        return f"{code} {getattr(response, 'reason_phrase', '')}".strip()
