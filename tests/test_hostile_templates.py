"""Hostile templates that passed validation and hurt later: a NUL character in any string of
a template (one tenant's command made every period of the server fail). In process (FastAPI
TestClient over a manager, a backend without cgroups: the ``world`` fixture)."""

from __future__ import annotations

import json
from typing import Any

import pytest

BASE: dict[str, Any] = {"name": "nul", "controller": {"policy": "best-effort"}, "budget": "1",
                        "clusters": [{"name": "c", "command": "sleep 60", "cpu": 0.1,
                                      "memory": 32}]}


def _with(path: list[Any], value: Any) -> dict[str, Any]:
    t = json.loads(json.dumps(BASE))
    node = t
    for k in path[:-1]:
        node = node.setdefault(k, {}) if isinstance(k, str) else node[k]
    node[path[-1]] = value
    return t


@pytest.mark.parametrize(("path", "value", "field"), [
    (["clusters", 0, "command"], "sleep 60\0x", "clusters.0.command"),
    (["clusters", 0, "monitor"], {"kind": "command", "command": "echo\0"},
     "clusters.0.monitor.command"),
    (["commands", "start"], "echo hi\0", "commands.start"),
    (["clusters", 0, "monitor"], {"kind": "log", "regex": "x", "path": "a\0"},
     "clusters.0.monitor.path"),
    (["controller", "params"], {"seed\0": 1}, "controller.params.seed\\0"),
])
def test_a_nul_anywhere_in_a_template_is_refused_at_submit(
        world: Any, path: list[Any], value: Any, field: str) -> None:
    """``"command": "sleep 60\\u0000x"`` was queued and admitted; its VM's start then raised
    ``ValueError: embedded null byte`` inside the period, so every period failed, for every
    user, while the platform existed (``/health`` 503, nothing scheduled, retried forever);
    on PostgreSQL a NUL in any stored text fails too. 422 naming the field, nothing stored,
    and the periods go on."""
    c, m, keys = world
    r = c.post("/api/v1/platforms", json=_with(path, value),
               headers={"Authorization": f"Bearer {keys['alice']}"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"] == (f"{field}: holds a NUL character (\\0): no command, file "
                                  "name, environment or database text can")
    assert m.store.platform("nul") is None
    assert m.admit() == []
    m.tick()  # the period runs


def test_a_nul_in_a_yaml_template_names_its_line(world: Any) -> None:
    c, _, keys = world
    text = ('name: nul\ncontroller: {policy: best-effort}\nbudget: 1\nclusters:\n'
            '  - {name: c, command: "sleep 60\\0"}\n')
    r = c.post("/api/v1/platforms", content=text, headers={
        "Authorization": f"Bearer {keys['bob']}", "content-type": "application/yaml"})
    assert r.status_code == 422
    assert r.json()["detail"].startswith("template line 5: clusters.0.command: holds a NUL")
