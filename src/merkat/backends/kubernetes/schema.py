"""Requests and responses checked against the Kubernetes API's schema (a pinned version).

The schema is the one ``kubernetes-validate`` ships (a dev dependency, imported lazily): the
JSON Schema of every definition of the Kubernetes OpenAPI document, in its *strict* variant
(``additionalProperties: false``), so a field the real API server does not know — which it
rejects under ``fieldValidation=Strict`` and silently drops otherwise — fails the check, as does
a wrong type or a missing required field. :data:`VERSION` pins the Kubernetes version.

:func:`check_request` maps one request (verb, path, query, JSON body) to the definition the API
server decodes it as — ``POST pods``: ``Pod``; ``POST pods/{name}/binding``: ``Binding``;
``PATCH pods/{name}/resize``: a ``Pod`` patch; ``POST namespaces``: ``Namespace``; ``POST
persistentvolumeclaims``: ``PersistentVolumeClaim`` — and checks the query parameters of the
body-less calls (``exec``, ``log``, ``DELETE``, lists) against the parameters the API declares
for them (``PodExecOptions``, ``PodLogOptions``, ``DeleteOptions``, ``ListOptions``: not in the
JSON Schema set, which holds only bodies, so transcribed below from the 1.35 API reference).
:func:`check_response` checks what the API answers (``Pod``, ``PodList``, ``NodeList``,
``Status``...) by its ``kind``. Both return the violations as ``"path: message"`` strings.
"""

from __future__ import annotations

import functools
import json
import re
from typing import Any

VERSION = "1.35.0"  # the Kubernetes version whose API schema requests are checked against
_BASE = "https://kubernetes.io/api/_definitions.json"
_CORE, _META = "io.k8s.api.core.v1.", "io.k8s.apimachinery.pkg.apis.meta.v1."
_BOOL, _INT, _STR = "bool", "int", "str"

# Query parameters of the body-less calls (Kubernetes 1.35 API reference, "Operations").
_EXEC = {"command": "list", "container": _STR, "stdin": _BOOL, "stdout": _BOOL,
         "stderr": _BOOL, "tty": _BOOL}
_LOG = {"container": _STR, "follow": _BOOL, "insecureSkipTLSVerifyBackend": _BOOL,
        "limitBytes": _INT, "pretty": _STR, "previous": _BOOL, "sinceSeconds": _INT,
        "sinceTime": _STR, "stream": _STR, "tailLines": _INT, "timestamps": _BOOL}
_DELETE = {"dryRun": _STR, "gracePeriodSeconds": _INT, "ignoreStoreReadErrorWithClusterBreakingPotential": _BOOL,
           "orphanDependents": _BOOL, "pretty": _STR, "propagationPolicy": _STR}
_LIST = {"allowWatchBookmarks": _BOOL, "continue": _STR, "fieldSelector": _STR,
         "labelSelector": _STR, "limit": _INT, "pretty": _STR, "resourceVersion": _STR,
         "resourceVersionMatch": _STR, "sendInitialEvents": _BOOL, "timeoutSeconds": _INT,
         "watch": _BOOL}
_WRITE = {"dryRun": _STR, "fieldManager": _STR, "fieldValidation": _STR, "pretty": _STR}
_PATCH = {**_WRITE, "force": _BOOL}

_NS = r"/api/v1/namespaces/[^/]+"
_ROUTES: list[tuple[str, re.Pattern[str], str | None, dict[str, str]]] = [
    ("POST", re.compile(rf"^{_NS}/pods$"), _CORE + "Pod", _WRITE),
    ("POST", re.compile(rf"^{_NS}/pods/[^/]+/binding$"), _CORE + "Binding", _WRITE),
    ("PATCH", re.compile(rf"^{_NS}/pods/[^/]+/resize$"), _CORE + "Pod", _PATCH),
    ("PATCH", re.compile(rf"^{_NS}/pods/[^/]+$"), _CORE + "Pod", _PATCH),
    ("POST", re.compile(r"^/api/v1/namespaces$"), _CORE + "Namespace", _WRITE),
    ("POST", re.compile(rf"^{_NS}/persistentvolumeclaims$"), _CORE + "PersistentVolumeClaim",
     _WRITE),
    ("GET", re.compile(rf"^{_NS}/pods/[^/]+/exec$"), None, _EXEC),
    ("POST", re.compile(rf"^{_NS}/pods/[^/]+/exec$"), None, _EXEC),
    ("GET", re.compile(rf"^{_NS}/pods/[^/]+/log$"), None, _LOG),
    ("DELETE", re.compile(rf"^{_NS}/(pods|persistentvolumeclaims)/[^/]+$"), None, _DELETE),
    ("GET", re.compile(r"^/api/v1(/namespaces/[^/]+)?/(pods|persistentvolumeclaims)$"
                       r"|^/api/v1/nodes$"), None, _LIST),
    ("GET", re.compile(rf"^{_NS}/(pods|persistentvolumeclaims)/[^/]+$|^/api/v1/nodes/[^/]+$"),
     None, {"pretty": _STR}),
]


@functools.lru_cache(maxsize=1)
def _registry() -> Any:
    import importlib.resources

    from referencing import Registry, Resource

    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema"
    defs = json.loads((root / f"v{VERSION}-local-strict" / "_definitions.json").read_text())
    return Registry().with_resource(_BASE, Resource.from_contents(defs))


@functools.lru_cache(maxsize=64)
def _validator(definition: str) -> Any:
    from jsonschema import Draft202012Validator

    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "$ref": f"{_BASE}#/$defs/{definition}"}
    return Draft202012Validator(schema, registry=_registry())


def check(definition: str, obj: Any) -> list[str]:
    """Violations of ``obj`` against ``definition`` (``"io.k8s.api.core.v1.Pod"``), as
    ``"spec.containers.0.foo: Additional properties are not allowed..."``; ``[]`` when valid."""
    errors = sorted(_validator(definition).iter_errors(obj), key=lambda e: list(e.path))
    return [f"{'.'.join(str(p) for p in e.path) or '<root>'}: {e.message}" for e in errors]


def _check_query(query: dict[str, list[str]], allowed: dict[str, str]) -> list[str]:
    out = []
    for key, values in query.items():
        kind = allowed.get(key)
        if kind is None:
            out.append(f"?{key}: not a parameter of this call")
        elif kind != "list" and len(values) > 1:
            out.append(f"?{key}: given {len(values)} times")
        elif kind == _BOOL and any(v not in ("true", "false", "1", "0") for v in values):
            out.append(f"?{key}: {values[-1]!r} is not a boolean")
        elif kind == _INT and any(not re.fullmatch(r"-?[0-9]+", v) for v in values):
            out.append(f"?{key}: {values[-1]!r} is not an integer")
    return out


def check_request(verb: str, path: str, query: dict[str, list[str]], body: Any) -> list[str]:
    """Violations of one request against the API (``[]``: the API server would decode it). A
    request to a path the table does not know is itself a violation (the table must cover
    every call the backend makes)."""
    for v, pattern, definition, params in _ROUTES:
        if v == verb and pattern.match(path):
            errors = _check_query(query, params)
            if definition is not None:  # a merge patch's null deletes the field: not checked
                errors += check(definition, _without_nulls(body) if verb == "PATCH" else body)
            elif body is not None:
                errors.append(f"<body>: {verb} {path} takes no body")
            return errors
    return [f"{verb} {path}: not a call the schema table knows"]


def _without_nulls(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _without_nulls(v) for k, v in obj.items() if v is not None}
    return obj


def check_response(body: Any) -> list[str]:
    """Violations of an API answer, by its ``kind`` (``Pod``, ``PodList``, ``NodeList``,
    ``Namespace``, ``PersistentVolumeClaim``, ``Status``...)."""
    if not isinstance(body, dict) or not isinstance(body.get("kind"), str):
        return ["<root>: an API object has a kind"]
    kind = body["kind"]
    return check((_META if kind == "Status" else _CORE) + kind, body)
