"""The published OpenAPI document matches the API's real responses: every operation is called
(as its owner, another user, an admin, without a key, with bad input, in conflicting states)
and each answer's status must be documented for the operation and its body valid against
the documented schema (jsonschema, with the document's components)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from fastapi.testclient import TestClient

from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager

TEMPLATE = """\
name: {name}
controller: {{policy: best-effort}}
budget: 5
clusters:
  - {{name: main, command: "sleep 30", cpu: 0.5, memory: 32}}
"""


class Checked:
    """A TestClient whose every response is checked against the app's OpenAPI document."""

    def __init__(self, client: TestClient) -> None:
        self.c = client
        self.doc = client.get("/api/v1/openapi.json").json()
        self.called: set[tuple[str, str]] = set()
        self.statuses: set[tuple[str, str, int]] = set()

    def _operation(self, method: str, url: str) -> tuple[str, dict[str, Any]]:
        path = url.split("?", 1)[0]
        for template, item in self.doc["paths"].items():
            parts, want = template.split("/"), path.split("/")
            if method in item and len(parts) == len(want) and all(
                    p == w or (p.startswith("{") and w) for p, w in zip(parts, want, strict=True)):
                return template, item[method]
        raise AssertionError(f"{method.upper()} {path} is not in the OpenAPI document")

    def __call__(self, method: str, url: str, key: str | None = None, expect: int | None = None,
                 **kw: Any) -> Any:
        headers = dict(kw.pop("headers", {}))
        if key is not None:
            headers["Authorization"] = f"Bearer {key}"
        r = self.c.request(method.upper(), url, headers=headers, **kw)
        template, op = self._operation(method, url)
        self.called.add((method, template))
        self.statuses.add((method, template, r.status_code))
        where = f"{method.upper()} {url} -> {r.status_code} {r.text[:200]}"
        assert str(r.status_code) in op["responses"], f"undocumented status: {where}"
        if expect is not None:
            assert r.status_code == expect, where
        content = op["responses"][str(r.status_code)].get("content", {})
        ctype = r.headers.get("content-type", "").split(";")[0]
        if content:
            assert ctype in content, f"content type {ctype} not documented: {where}"
            schema = content[ctype].get("schema", {})
            body = r.json() if ctype == "application/json" else r.text
            errors = [e.message for e in jsonschema_rs.Draft202012Validator(
                {**schema, "components": self.doc["components"]}).iter_errors(body)]
            assert not errors, f"{where}: {errors[:3]}"
        return r


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[Checked, dict[str, str], Manager]]:
    cfg = load_config(None, data_dir=tmp_path, period=1.0, admission=0.5,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups")},
                      limits={"body_bytes": 64 * 1024}, tenants={"max_file": 1000})
    store = open_store(cfg.database)
    keys = {"alice": store.add_user("alice", budget=100_000_000),
            "bob": store.add_user("bob", budget=10_000_000),
            "root": store.add_user("root", admin=True)}
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield Checked(c), keys, m
    m.close()


def test_the_document_has_one_error_shape_and_security_schemes(api: Any) -> None:
    call, _, _ = api
    doc = call.doc
    assert "HTTPValidationError" not in doc["components"]["schemas"]
    assert doc["components"]["schemas"]["Error"]["properties"]["detail"] == {
        "type": "string", "description": "One line naming the field or the object"}
    assert set(doc["components"]["securitySchemes"]) == {"bearer", "apiKey"}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for code, resp in op["responses"].items():
                if code >= "400" and code != "503":
                    assert resp["content"]["application/json"]["schema"] == {
                        "$ref": "#/components/schemas/Error"}, (method, path, code)
            assert ("security" in op) == (path != "/api/v1/health"), (method, path)
            assert not any(p["in"] == "header" for p in op.get("parameters", []))


def test_every_operation_answers_as_documented(api: Any) -> None:
    call, k, m = api
    a, b, root = k["alice"], k["bob"], k["root"]
    yaml = {"content-type": "application/yaml"}
    call("get", "/api/v1/health", expect=200)
    for url in ("/api/v1/users/me", "/api/v1/platforms", "/api/v1/prices", "/api/v1/nodes",
                "/api/v1/allocations", "/api/v1/accounts", "/api/v1/prices/history",
                "/api/v1/events", "/api/v1/events/stream", "/api/v1/platforms/x",
                "/api/v1/accounts/alice"):
        call("get", url, expect=401)
        call("get", url, "mk_wrong", expect=401)
    for url in ("/api/v1/platforms", "/api/v1/transfers", "/api/v1/keys",
                "/api/v1/transfer-tokens/redeem", "/api/v1/platforms/x/stop",
                "/api/v1/platforms/x/boost", "/api/v1/platforms/x/metrics"):
        call("post", url, json={}, expect=401)
    # platforms
    call("post", "/api/v1/platforms", a, content=TEMPLATE.format(name="one"), headers=yaml,
         expect=201)
    call("post", "/api/v1/platforms", a, content=TEMPLATE.format(name="one"), headers=yaml,
         expect=409)
    call("post", "/api/v1/platforms", a, json={"name": "two", "budget": 1,
                                               "controller": {"policy": "best-effort"},
                                               "clusters": [{"name": "m", "command": "true"}]},
         expect=201)
    call("post", "/api/v1/platforms", a, content="<platform><name>x</name></platform>",
         headers={"content-type": "application/xml"}, expect=422)
    call("post", "/api/v1/platforms", a, content="name: [", headers=yaml, expect=422)
    call("post", "/api/v1/platforms", a, content=b"x" * 70_000, headers=yaml, expect=413)
    call("post", "/api/v1/platforms", a, content=b'{"name": NaN}',
         headers={"content-type": "application/json"}, expect=422)
    call("get", "/api/v1/platforms", a, expect=200)
    call("get", "/api/v1/platforms", root, expect=200)
    call("get", "/api/v1/platforms/one", a, expect=200)
    call("get", "/api/v1/platforms/one", b, expect=404)
    call("get", "/api/v1/platforms/one", root, expect=200)
    call("get", "/api/v1/platforms/one/logs?tail=5", a, expect=200)
    call("get", "/api/v1/platforms/one/logs?tail=0", a, expect=422)
    call("get", "/api/v1/platforms/nope/logs", a, expect=404)
    call("post", "/api/v1/platforms/one/metrics", a, json={"work_done": 3}, expect=202)
    call("post", "/api/v1/platforms/one/metrics", a, json={"work_done": -1}, expect=422)
    call("post", "/api/v1/platforms/one/metrics", b, json={"work_done": 1}, expect=404)
    m.admit()  # a queued platform cannot be boosted yet
    call("post", "/api/v1/platforms/one/boost", a, json={"amount": "1"}, expect=201)
    call("post", "/api/v1/platforms/one/boost", a, json={"amount": "1e400"}, expect=422)
    call("post", "/api/v1/platforms/one/boost", a, json={"amount": "-1"}, expect=422)
    call("post", "/api/v1/platforms/one/boost", b, json={"amount": "1"}, expect=404)
    call("post", "/api/v1/platforms/one/stop", b, expect=404)
    call("post", "/api/v1/platforms/one/stop", a, expect=200)
    call("post", "/api/v1/platforms/one/boost", a, json={"amount": "1"}, expect=409)
    call("delete", "/api/v1/platforms/one", expect=401)
    call("delete", "/api/v1/platforms/one", b, expect=404)
    call("delete", "/api/v1/platforms/two", a, expect=409)  # not ended
    call("delete", "/api/v1/platforms/one", a, expect=200)
    call("delete", "/api/v1/platforms/one", a, expect=404)
    call("post", "/api/v1/platforms/one/stop", a, content=b"[" * 100,
         headers={"content-type": "application/json"}, expect=422)
    # market
    call("get", "/api/v1/prices", b, expect=200)
    call("get", "/api/v1/prices/history?limit=5", b, expect=200)
    call("get", "/api/v1/prices/history?limit=0", b, expect=422)
    call("get", "/api/v1/nodes", b, expect=200)
    call("get", "/api/v1/allocations", root, expect=200)
    call("get", "/api/v1/users/me", b, expect=200)
    # bank
    call("get", "/api/v1/accounts", a, expect=200)
    call("get", "/api/v1/accounts", root, expect=200)
    call("get", "/api/v1/accounts/alice", a, expect=200)
    call("get", "/api/v1/accounts/alice", b, expect=404)
    call("get", "/api/v1/accounts/alice/history?limit=3", a, expect=200)
    call("get", "/api/v1/accounts/alice/history?limit=0", a, expect=422)
    call("get", "/api/v1/accounts/nobody/history", root, expect=404)
    call("post", "/api/v1/transfers", a, json={"from": "alice", "to": "bob", "amount": "1.5"},
         expect=201)
    call("post", "/api/v1/transfers", a, json={"from": "alice", "to": "nobody", "amount": "1"},
         expect=404)
    call("post", "/api/v1/transfers", a, json={"from": "bob", "to": "alice", "amount": "1"},
         expect=404)
    call("post", "/api/v1/transfers", a, json={"from": "alice", "to": "bob", "amount": "abc"},
         expect=422)
    call("post", "/api/v1/transfers", a, content=b'{"from": "alice", "amount": Infinity}',
         headers={"content-type": "application/json"}, expect=422)
    call("post", "/api/v1/keys", a, json={"public_key": "not a key"}, expect=422)
    call("post", "/api/v1/keys", a, json={"public_key": 1e308}, expect=422)
    call("post", "/api/v1/transfer-tokens/redeem", a, json={"token": "x"}, expect=422)
    call("post", "/api/v1/transfer-tokens/redeem", a, json={}, expect=422)
    # events
    call("get", "/api/v1/events", a, expect=200)
    call("get", "/api/v1/events?tail=3", root, expect=200)
    call("get", "/api/v1/events?after=9223372036854775808", a, expect=422)
    call("get", "/api/v1/events/stream?after=-1", a, expect=422)
    # files (the sources of files_in)
    octet = {"content-type": "application/octet-stream"}
    call("put", "/api/v1/files/in.txt", content=b"42", headers=octet, expect=401)
    call("get", "/api/v1/files", expect=401)
    call("put", "/api/v1/files/in.txt", a, content=b"42", headers=octet, expect=201)
    call("put", "/api/v1/files/.x", a, content=b"42", headers=octet, expect=422)
    call("put", "/api/v1/files/big", a, content=b"x" * (m.config.tenants.max_file + 1),
         headers=octet, expect=413)
    call("get", "/api/v1/files", a, expect=200)
    call("delete", "/api/v1/files/in.txt", expect=401)
    call("delete", "/api/v1/files/.x", a, expect=422)
    call("delete", "/api/v1/files/in.txt", a, expect=204)
    call("delete", "/api/v1/files/in.txt", a, expect=404)
    # every operation of the document was called (the stream's 200 is in test_hostile_http)
    ops = {(meth, p) for p, item in call.doc["paths"].items() for meth in item}
    assert ops - call.called == set(), sorted(ops - call.called)
    seen = {code for _, _, code in call.statuses}
    assert {200, 201, 202, 401, 404, 409, 413, 422} <= seen
    json.dumps(sorted(call.statuses))  # for the failure message, were it to fail
