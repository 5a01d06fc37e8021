"""The parsers with limits (service/limits.py), VM logs in bounded memory (service/logtail.py)
and the API's error shape for bad bodies, in process (the hostile end-to-end runs against a
real server are in tests/test_hostile_http.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from merkat.service.api import create_app
from merkat.service.backends import make_backend
from merkat.service.config import ConfigError, load_config
from merkat.service.db import open_store
from merkat.service.limits import InputError, LimitsConfig, check_finite, load_json, load_yaml
from merkat.service.logtail import LogCap, cap, platform_logs, tail
from merkat.service.manager import Manager
from merkat.service.templates import TemplateError, parse


def alias_bomb(levels: int = 9, key: str = "horizon") -> str:
    """A template whose ``controller.params`` hold ``10**levels`` strings in ~480 bytes."""
    parts = ["&a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, levels)]
    return ("name: bomb\ncontroller:\n  policy: best-effort\n  params:\n    "
            f"{key}: [" + ", ".join(parts) + "]\nbudget: 1\n"
            "clusters:\n  - {name: m, command: 'true'}\n")


def test_the_alias_bomb_stops_at_the_node_budget_in_milliseconds() -> None:
    text = alias_bomb(9)
    assert len(text) < 700
    t0 = time.perf_counter()
    with pytest.raises(TemplateError) as info:
        parse(text)
    assert time.perf_counter() - t0 < 0.5
    assert str(info.value) == "template line 5: more than 20000 nodes (aliases expanded)"
    # a few aliases within the budget are fine (anchors for repeated clusters)
    t = parse("name: ok\ncontroller: {policy: best-effort}\nbudget: 1\nclusters:\n"
              "  - &c {name: a, command: 'true', cpu: 0.5}\n  - {<<: *c, name: b}\n")
    assert [(c.name, c.cpu) for c in t.clusters] == [("a", 0.5), ("b", 0.5)]


@pytest.mark.parametrize(("text", "message"), [
    ("a: &a [*a]\n", "line 1: recursive alias *a"),
    ("a:\n" + "".join("  " * i + " - \n" for i in range(1, 60)), "line 33: nested deeper than 32"),
    ("[" * 200_000, "line 1: not valid YAML"),
    ("a: &x [" + "1, " * 50 + "1]\nb: [" + ", ".join(["*x"] * 500) + "]\n",
     "line 2: more than 20000 nodes"),
])
def test_yaml_limits(text: str, message: str) -> None:
    with pytest.raises(InputError) as info:
        load_yaml(text)
    assert message in str(info.value)
    assert len(str(info.value)) < 200


def test_the_config_file_is_read_within_the_same_limits(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(alias_bomb(9))
    with pytest.raises(ConfigError, match=r"line 5: more than 20000 nodes"):
        load_config(f)
    f.write_text("limits: {body_bytes: 2048, header_timeout: 3}\n")
    c = load_config(f)
    assert (c.limits.body_bytes, c.limits.header_timeout, c.limits.depth) == (2048, 3.0, 32)
    f.write_text("limits: {body_bytes: 10}\n")
    with pytest.raises(ConfigError, match=r"limits\.body_bytes: Input should be greater"):
        load_config(f)
    monkeypatch.setenv("MERKAT_LIMITS__STREAMS_PER_USER", "3")
    assert load_config(None).limits.streams_per_user == 3


@pytest.mark.parametrize(("text", "message"), [
    ('{"a": NaN}', "NaN is not a number JSON allows"),
    ('{"a": -Infinity}', "-Infinity is not a number JSON allows"),
    ('{"a": 1e400}', "overflows to infinity"),
    ("[" * 40 + "]" * 40, "nested deeper than 32 levels"),
    ("[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
    ('{"a": 1', "not valid JSON"),
])
def test_json_limits(text: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        load_json(text)


def test_json_within_the_limits_and_finite_checks() -> None:
    assert load_json('{"a": [1.5, {"b": 2}]}') == {"a": [1.5, {"b": 2}]}
    assert load_json("[" * 32 + "]" * 32, LimitsConfig(depth=32))
    with pytest.raises(InputError, match=r"^p\.x\.1: must be a finite number$"):
        check_finite({"x": [1.0, float("inf")]}, "p")


def test_non_finite_template_values_are_refused_naming_the_field() -> None:
    base = "name: x\ncontroller: {policy: best-effort%s}\nbudget: 1\nclusters:\n  - {name: m, command: 'true'%s}\n"
    with pytest.raises(TemplateError, match=r"^template: controller\.params\.horizon: must be a finite"):
        parse(base % (", params: {horizon: .nan}", ""))
    with pytest.raises(TemplateError, match=r"clusters\.0\.bid\.cpu: Input should be a finite"):
        parse(base % ("", ", bid: {cpu: .inf}"))
    with pytest.raises(TemplateError, match=r"^template line 3: poll: Input should be a finite"):
        parse(base.replace("budget: 1", "poll: .inf\nbudget: 1") % ("", ""))


def test_xml_with_a_doctype_is_refused_before_expansion() -> None:
    laughs = ('<?xml version="1.0"?><!DOCTYPE p [<!ENTITY a "aaaaaaaaaa">'
              + "".join(f'<!ENTITY a{i} "' + f"&a{i - 1};" * 10 + '">'
                        for i in range(1, 10)).replace("&a0;", "&a;")
              + "]><platform><name>&a9;</name></platform>")
    t0 = time.perf_counter()
    with pytest.raises(TemplateError, match=r"a DOCTYPE \(entity declarations\) is not allowed"):
        parse(laughs, fmt="xml")
    assert time.perf_counter() - t0 < 0.05


# --- logs ------------------------------------------------------------------------------------


def test_tail_reads_the_end_only(tmp_path: Path) -> None:
    f = tmp_path / "vm.log"
    with open(f, "wb") as out:
        out.truncate(200 << 20)  # 200 MB (sparse) then three lines
        out.seek(0, 2)
        out.write(b"one\ntwo\nthree\n")
    assert tail(f, 2, 1 << 20) == ["two", "three"]
    assert tail(f, 1, 1 << 20) == ["three"]
    assert tail(f, 100_000, 1 << 20) == ["two", "three"]  # "\0...one" was cut at 1 MB
    assert tail(tmp_path / "missing.log", 5, 1024) == []


def test_cap_keeps_the_newest_half_from_a_line_start(tmp_path: Path) -> None:
    d = tmp_path / "logs" / "p"
    d.mkdir(parents=True)
    f = d / "vm.log"
    f.write_bytes(b"".join(b"line %06d\n" % i for i in range(20_000)))  # 240,000 bytes
    LogCap(tmp_path / "logs", 100_000)()
    text = f.read_bytes()
    assert len(text) <= 100_000
    lines = text.decode().splitlines()
    assert lines[0].startswith("[merkat: ") and lines[0].endswith(" bytes of older output dropped]")
    assert lines[-1] == "line 019999"
    assert lines[1] == f"line {20_000 - len(lines) + 1:06d}"  # whole lines, in order
    with open(f, "ab") as out:  # the VM's fd (O_APPEND) goes on at the new end
        out.write(b"after\n")
    assert f.read_bytes().endswith(b"line 019999\nafter\n")
    assert cap(f, 100_000) == 0


# --- the API in process ----------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path) -> Iterator[tuple[TestClient, str, Manager]]:
    cfg = load_config(None, data_dir=tmp_path, backend={"cgroup_root": str(tmp_path / "no")},
                      limits={"body_bytes": 4096})
    store = open_store(cfg.database)
    key = store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    with TestClient(create_app(m)) as c:
        yield c, key, m
    m.close()


def test_bad_bodies_answer_one_line_errors(client: Any) -> None:
    c, key, m = client
    h = {"Authorization": f"Bearer {key}", "content-type": "application/json"}
    r = c.post("/api/v1/transfers", content=b'{"from": "alice", "to": "alice", "amount": NaN}',
               headers=h)
    assert (r.status_code, r.json()) == (422, {
        "detail": "body: NaN is not a number JSON allows (numbers must be finite)"})
    r = c.post("/api/v1/platforms", content="x" * 5000, headers=h)
    assert (r.status_code, r.json()) == (413, {"detail": "body: larger than 4096 bytes"})
    # a GET's body is never read: neither buffered nor checked
    assert c.request("GET", "/api/v1/prices", content=b"[" * 5000, headers=h).status_code == 200
    r = c.get("/api/v1/events?after=9223372036854775808", headers=h)
    assert r.status_code == 422 and r.json()["detail"].startswith("after: Input should be less")
    # a validation error never echoes the input
    r = c.post("/api/v1/transfers", json={"from": "alice", "to": "x" * 3000, "amount": 1},
               headers=h)
    assert r.status_code == 422 and "xxxx" not in r.text
    assert r.json()["detail"] == "amount: Input should be a valid string"
    # events are cut
    m.store.add_event("test", "y" * 1_000_000)
    assert len(m.store.events_tail(1)[0]["message"]) == 2000


def test_platform_logs_share_one_read_budget(tmp_path: Path) -> None:
    base = tmp_path / "p"
    base.mkdir()
    for k in range(10):  # ten VMs with 1 MB of lines each
        (base / f"vm{k}.log").write_bytes(b"".join(b"line %06d of vm%d\n" % (i, k)
                                                   for i in range(60_000)))
    out = platform_logs(base, 100_000, 100_000)  # ~10 KB per file, not 1 MB
    assert 90_000 < len(out) < 110_000
    assert out.count("==> vm") == 10 and "line 059999 of vm9" in out
    assert platform_logs(base, 1, 100_000).splitlines()[:2] == ["==> vm0.log <==",
                                                                 "line 059999 of vm0"]
    assert platform_logs(tmp_path / "none", 5, 1000) == ""
