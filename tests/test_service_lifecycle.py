"""The applications manager's life cycle on the local backend: a controller's suspend freezes
the VM (no progress) and its resume lets it progress again; custom controllers load by name
from the ``merkat.controllers`` entry-point group; the template's plugins run on events."""

from __future__ import annotations

import importlib.metadata
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from merkat.control.base import Controller
from merkat.control.types import Action, Demand, Observation, Phase
from merkat.service.backends import make_backend
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.manager import Manager
from merkat.service.templates import parse


class Pulse(Controller):
    """Starts, runs, suspends at its ``suspend_at``-th decision, resumes at ``resume_at``."""

    name = "pulse"

    def __init__(self, *, suspend_at: int = 3, resume_at: int = 6) -> None:
        super().__init__()
        self.n = 0
        self.suspend_at, self.resume_at = suspend_at, resume_at

    def decide(self, obs: Observation) -> Demand:
        self.n += 1
        if obs.phase is Phase.WAITING:
            return self.on_start(obs)
        if self.n == self.suspend_at:
            return Demand(Action.SUSPEND, nvms=len(obs.vms), reason="pulse")
        if obs.phase is Phase.SUSPENDED:
            return self.keep(obs, Action.RESUME) if self.n >= self.resume_at else self.wait(
                obs, "pulse")
        return self.keep(obs)

    def reconfigure(self, obs: Observation) -> Demand:
        return self.keep(obs)


class _EP:
    name = "pulse"
    group = "merkat.controllers"

    def load(self) -> type[Controller]:
        return Pulse


@pytest.fixture
def manager(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Manager]:
    real = importlib.metadata.entry_points

    def eps(**kw: Any) -> Any:
        return [_EP()] if kw.get("group") == "merkat.controllers" else real(**kw)

    monkeypatch.setattr(importlib.metadata, "entry_points", eps)
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_prefix": f"merkat-lc-{uuid.uuid4().hex[:8]}"})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    yield m
    m.close()


TEMPLATE = """\
name: pulse
controller: {policy: pulse, params: {suspend_at: 4, resume_at: 8}}
budget: 10
commands:
  suspend: echo suspended >> %(marks)s
  resume: echo resumed >> %(marks)s
clusters:
  - name: main
    command: exec "$MERKAT_PYTHON" -m merkat.examples.solver --iterations 100000 --cost 0.01
    cpu: 1
    memory: 96
    monitor: {kind: log, regex: 'iteration (?P<work_done>\\d+)/(?P<work_total>\\d+)'}
"""


def progress(m: Manager) -> int:
    log = Path(m.backend.log_path("pulse/vm1") or "")
    found = re.findall(r"iteration (\d+)/", log.read_text()) if log.exists() else []
    return int(found[-1]) if found else 0


def test_suspend_freezes_the_vm_and_resume_lets_it_progress(manager: Manager,
                                                             tmp_path: Path) -> None:
    m = manager
    marks = m.tenants.identity("alice").home / "marks"  # plugins run in the owner's area
    m.submit("alice", parse(TEMPLATE % {"marks": marks}))
    m.admit()
    states = []
    work = []
    for _ in range(10):
        m.tick()
        states.append(m.store.platform("pulse").state)  # type: ignore[union-attr]
        time.sleep(0.6)
        work.append(progress(m))
    # decisions 1..3 run, 4..7 suspended, 8.. running again
    assert states[:3] == ["running"] * 3
    assert states[3:7] == ["suspended"] * 4
    assert states[7:] == ["running"] * 3
    assert work[2] > work[0] > 0  # progressing
    assert work[6] - work[4] <= 1  # frozen: (at most the iteration in flight)
    assert work[9] > work[7] + 1  # progressing again after the resume
    if m.backend.enforced:
        assert not m.backend.tree.frozen("pulse/vm1")
    assert m.backend.vms["pulse/vm1"].state == "running"
    time.sleep(0.5)
    assert marks.read_text().split() == ["suspended", "resumed"]


def test_a_task_farm_runs_to_completion_under_the_horizontal_policy(
        manager: Manager, tmp_path: Path) -> None:
    m = manager
    text = (Path(__file__).parents[1] / "examples/taskfarm/taskfarm.yaml").read_text()
    text = text.replace("--tasks 60 --cost 0.5", "--tasks 12 --cost 0.05").replace(
        "budget: 400", "budget: 50")
    m.submit("alice", parse(text))
    m.admit()
    end = time.monotonic() + 60
    while m.store.platform("taskfarm").state not in ("finished", "stopped", "failed"):  # type: ignore[union-attr]
        assert time.monotonic() < end, "the task farm did not finish"
        m.tick()
        time.sleep(0.3)
    row = m.store.platform("taskfarm")
    assert row is not None and row.state == "finished", row
    queue = m.tenants.identity("alice").home / "work" / "taskfarm" / "shared" / "queue"
    assert len(list((queue / "done").iterdir())) == 12
    assert (queue / "finished").exists()


@pytest.mark.parametrize("path", sorted(
    str(p) for d in ("solver", "taskfarm")
    for p in (Path(__file__).parents[1] / "examples" / d).iterdir()
    if p.suffix in (".yaml", ".xml")))
def test_the_examples_parse_and_name_known_controllers(path: str) -> None:
    from merkat.service.manager import make_controller
    from merkat.service.templates import load

    t = load(Path(path))
    make_controller(t.controller.policy, dict(t.controller.params))
    assert t.monitored.monitor is not None


def test_files_are_copied_in_before_the_start_and_out_after_the_end(
        manager: Manager, tmp_path: Path) -> None:
    from merkat.service.files import put_file

    m = manager
    alice = m.tenants.identity("alice")
    assert put_file(alice, "input.txt", [b"21\n"], 100, 10) == 3  # as `merkat file put`
    text = """\
name: files
controller: {policy: best-effort}
budget: 5
clusters:
  - name: main
    command: echo $(( $(cat input.txt) * 2 )) > result.txt; echo "$MERKAT_SHARED" > shared.txt
    files_in: [input.txt]
    files_out: [result.txt, shared.txt, absent.txt]
"""
    m.submit("alice", parse(text))
    m.admit()
    end = time.monotonic() + 30
    while m.store.platform("files").state != "finished":  # type: ignore[union-attr]
        assert time.monotonic() < end
        m.tick()
        time.sleep(0.2)
    out = alice.home / "out" / "files" / "main-0"  # in the owner's area, made by her
    assert (out / "result.txt").read_text() == "42\n"
    assert (out / "shared.txt").read_text().strip() == str(
        alice.home / "work" / "files" / "shared")
    if alice.switches:
        assert {(f.stat().st_uid, f.stat().st_mode & 0o777) for f in (out, alice.home)} == {
            (alice.uid, 0o700)}
    assert any(e["kind"] == "files-out" and "absent.txt" in e["message"]
               for e in m.store.events(platform="files"))
