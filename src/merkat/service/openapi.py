"""The published OpenAPI document (``/api/v1/openapi.json``) says what the API answers.

:func:`install` replaces FastAPI's generator on an app with one that post-processes its
document:

- **one error shape**: the schema ``Error`` (``{"detail": string, "errors"?: [{type, loc,
  msg}]}``), for every error status, 422 included (FastAPI's ``HTTPValidationError``, whose
  ``detail`` is an array, is gone: :func:`merkat.service.http.install_errors` answers with a
  string);
- **authentication** as security schemes (``Authorization: Bearer KEY`` or ``X-API-Key``), not
  header parameters, on every operation but ``/health``;
- **every status an operation can return**, by rule: 401 (authenticated operations), 404
  (a path parameter names an object; ``POST /transfers``: the receiving account), 422 (query,
  path or body parameters; every ``POST``, whose JSON body is checked), 413 and 408 (every
  ``POST``: :class:`~merkat.service.http.BodyLimits`), and the operations' own codes in
  :data:`EXTRA` (409...). A route that raises a status not listed here fails
  ``tests/test_api_openapi.py``, which checks real responses of every operation against
  this document.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fastapi import FastAPI

ERROR = {
    "type": "object",
    "title": "Error",
    "required": ["detail"],
    "properties": {
        "detail": {"type": "string", "description": "One line naming the field or the object"},
        "errors": {
            "type": "array",
            "description": "A validation error's details (422): never the input",
            "items": {"type": "object", "required": ["type", "loc", "msg"], "properties": {
                "type": {"type": "string"},
                "loc": {"type": "array", "items": {"anyOf": [{"type": "string"},
                                                             {"type": "integer"}]}},
                "msg": {"type": "string"}}},
        },
    },
}

DESCRIPTIONS = {
    "401": "No API key, or not a valid one",
    "404": "No such object, or not the caller's",
    "408": "The request body was not received in time (limits.header_timeout)",
    "409": "Conflict with the object's state",
    "413": "The request body is larger than limits.body_bytes",
    "422": "Invalid input: `detail` names the field",
    "429": "Over one of the user's quotas: platforms, VMs (POST /platforms: `detail` names it, "
           "the use and the limit) or open event streams (limits.streams_per_user)",
}

EXTRA: dict[tuple[str, str], tuple[str, ...]] = {
    ("post", "/api/v1/platforms"): ("409", "429"),     # the name is taken; a quota is full
    ("post", "/api/v1/platforms/{name}/boost"): ("409",),  # ended; the key reused
    ("delete", "/api/v1/platforms/{name}"): ("409",),    # the platform has not ended
    ("post", "/api/v1/transfers"): ("404", "409"),     # no receiving account; the key reused
    ("get", "/api/v1/events/stream"): ("429",),         # limits.streams_per_user
    ("put", "/api/v1/files/{name}"): ("413", "408"),    # an upload over tenants.max_file
}
"""Statuses an operation returns beyond the rules (module doc)."""

STREAMS = {("get", "/api/v1/events/stream"): "text/event-stream"}
"""Operations whose 200 is not JSON: their media type (a string)."""

PUBLIC = {"/api/v1/health"}
"""Operations without authentication."""

AUTH_HEADERS = {"authorization", "x-api-key"}
BODY_METHODS = {"post", "put", "patch"}
"""Methods whose bodies :class:`~merkat.service.http.BodyLimits` reads and checks."""


def _error(code: str) -> dict[str, Any]:
    return {"description": DESCRIPTIONS.get(code, "Error"),
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def patch(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` (FastAPI's document) made to match the responses (module doc); in place."""
    comps = doc.setdefault("components", {})
    schemas = comps.setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schemas["Error"] = ERROR
    comps["securitySchemes"] = {
        "bearer": {"type": "http", "scheme": "bearer", "description": "Authorization: Bearer KEY"},
        "apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
    }
    submit = doc.get("paths", {}).get("/api/v1/platforms", {}).get("post")
    if submit is not None and "requestBody" not in submit:  # read raw: YAML, XML or JSON
        from merkat.service.templates import Template

        tmpl = Template.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in tmpl.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas["Template"] = tmpl
        text = {"schema": {"type": "string"}}
        submit["requestBody"] = {"required": True, "description": "A template (docs/service.md)",
                                 "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/Template"}},
            "application/yaml": text, "application/xml": text}}
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            params = [p for p in op.get("parameters", [])
                      if not (p.get("in") == "header" and p.get("name", "").lower() in AUTH_HEADERS)]
            if params:
                op["parameters"] = params
            else:
                op.pop("parameters", None)
            codes: set[str] = set(EXTRA.get((method, path), ()))
            if path not in PUBLIC:
                op["security"] = [{"bearer": []}, {"apiKey": []}]
                codes.add("401")
            if any(p.get("in") == "path" for p in params):
                codes.add("404")
            if params or "requestBody" in op or method in BODY_METHODS:
                codes.add("422")
            if method in BODY_METHODS:
                codes |= {"413", "408"}
            responses = op.setdefault("responses", {})
            media = STREAMS.get((method, path))
            if media is not None and "200" in responses:
                responses["200"]["content"] = {media: {"schema": {"type": "string"}}}
            if "422" in responses and not params and "requestBody" not in op \
                    and method not in BODY_METHODS:
                del responses["422"]  # only the (hidden) auth headers were parameters
            for code in sorted(codes):
                old = responses.get(code)
                if old is None or code == "422":
                    responses[code] = _error(code)
    return doc


def install(app: FastAPI) -> None:
    """Serve the patched document at the app's ``openapi_url`` (built once, on first use)."""
    from fastapi.openapi.utils import get_openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = patch(get_openapi(
                title=app.title, version=app.version, description=app.description,
                routes=app.routes))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
