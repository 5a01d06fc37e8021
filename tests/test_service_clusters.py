"""The paper's template, honoured (issue 26; Merkat Fig. 5, §4.2.1-4.2.3): every cluster's
monitor read and aggregated for the controller, ``poll`` per cluster (and XML's ``poll``
attribute), the heartbeat (``health.stall_s``) restarting a stalled VM up to
``max_restarts``, and ``keep_idle`` keeping released VMs."""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from merkat.control.base import Controller
from merkat.control.generic import resize
from merkat.control.types import (
    Action,
    Budget,
    Demand,
    Metrics,
    Observation,
    Phase,
    Sense,
    VMState,
    VMView,
)
from merkat.service.backends import make_backend
from merkat.service.clusters import aggregate
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.idle import KeepIdle, with_keep_idle
from merkat.service.manager import Manager, make_controller
from merkat.service.templates import parse

# --- aggregation (pure) -------------------------------------------------------------------


def test_the_controller_sees_the_sum_of_the_work_at_the_slowest_clusters_pace() -> None:
    a = Metrics(work_done=10, work_total=40, progress_rate=2.0, ideal_rate=4.0, tasks_left=3)
    b = Metrics(work_done=30, work_total=40, progress_rate=1.0, ideal_rate=5.0, tasks_left=1,
                task_time_max=7.0)
    m = aggregate({"a": a, "b": b})
    assert (m.work_done, m.work_total, m.work_left) == (40, 80, 40)
    # a needs 30/2 = 15 s, b 10/1 = 10 s: the whole finishes with a, in 15 s
    assert m.progress_rate == pytest.approx(40 / 15)
    assert m.work_left / m.progress_rate == pytest.approx(15.0)
    assert m.ideal_rate == pytest.approx(40 / max(30 / 4.0, 10 / 5.0))
    assert (m.tasks_left, m.task_time_max) == (4, 7.0)
    # a cluster with work left and no rate yet: the pace is unknown
    assert aggregate({"a": a, "b": Metrics(work_done=0, work_total=5)}).progress_rate is None
    # nothing left anywhere: the rates add up; one reading is itself
    done = aggregate({"a": Metrics(work_done=5, work_total=5, progress_rate=1.0),
                      "b": Metrics(work_done=2, work_total=2, progress_rate=0.5)})
    assert (done.work_left, done.progress_rate) == (0, 1.5)
    assert aggregate({"a": a}) is a and aggregate({}) == Metrics()


def test_the_worst_clusters_performance_is_the_platforms() -> None:
    slow = Metrics(performance=12.0, reference=10.0, sense=Sense.LOWER_IS_BETTER)
    fast = Metrics(performance=5.0, reference=10.0, sense=Sense.LOWER_IS_BETTER)
    m = aggregate({"x": fast, "y": slow})
    assert (m.performance, m.reference) == (12.0, 10.0)
    low = Metrics(performance=3.0, reference=10.0, sense=Sense.HIGHER_IS_BETTER)
    high = Metrics(performance=9.0, reference=10.0, sense=Sense.HIGHER_IS_BETTER)
    assert aggregate({"x": high, "y": low}).performance == 3.0


# --- XML's poll attribute and health ------------------------------------------------------

XML = """\
<platform>
  <name>CodeSaturne</name>
  <controller>best-effort</controller>
  <keepidle>600</keepidle>
  <budget>10</budget>
  <group name="saturne-0" poll="yes" controller="yes" process="mpirun">
    <command>./solver</command>
    <monitor kind="log" regex="it (?P&lt;work_done&gt;\\d+)"/>
  </group>
  <group name="saturne-1" poll="no" depends="saturne-0">
    <command>./worker</command>
    <monitor kind="log" regex="w (?P&lt;work_done&gt;\\d+)"/>
  </group>
  <group name="saturne-2" poll="30" depends="saturne-0"><command>./w</command></group>
  <poll>60</poll>
  <health><stall_s>120</stall_s></health>
</platform>
"""


def test_xml_poll_attributes_and_health() -> None:
    t = parse(XML)
    assert [c.poll for c in t.clusters] == [None, 0, 30]  # yes: <poll>; no: never; seconds
    assert t.poll == 60 and t.keep_idle == 600 and t.health.stall_s == 120
    with pytest.raises(ValueError, match="poll must be 0"):
        parse(XML.replace('poll="30"', 'poll="0.2"'))
    with pytest.raises(ValueError, match=r"health\.stall_s"):
        parse(XML.replace("<stall_s>120</stall_s>", "<stall_s>-1</stall_s>"))


# --- keep_idle ---------------------------------------------------------------------------


class Shrink:
    """A controller that asks for 2 VMs and releases ``vm2`` from ``at`` on."""

    name = "shrink"
    reads_price_history = False
    price_history_periods = 0

    def __init__(self, at: float) -> None:
        self.at = at

    def decide(self, obs: Observation) -> Demand:
        return resize(obs, 1 if obs.time >= self.at else 2, {"cpu": 0.5})

    reconfigure = decide


def obs(t: float) -> Observation:
    vms = tuple(VMView(id=f"a/vm{k}", state=VMState.RUNNING, alloc={"cpu": 0.5},
                       bid={"cpu": 0.5}) for k in (1, 2))
    return Observation(time=t, period=5.0, prices={"cpu": 1.0}, capacity={"cpu": 2.0},
                       vm_size={"cpu": 1.0}, budget=Budget(balance=100.0),
                       bid_min={"cpu": 0.001, "memory": 0.001}, vms=vms)


def test_keep_idle_keeps_a_released_vm_at_the_reserve_then_releases_it() -> None:
    ctl = KeepIdle(Shrink(at=10.0), keep_idle=30.0)  # type: ignore[arg-type]
    assert ctl.decide(obs(5.0)).release == ()  # not released yet
    for t in (10.0, 20.0, 39.0):
        d = ctl.decide(obs(t))
        assert d.action is Action.NONE and d.release == () and d.nvms == 2, t
        assert d.bids["a/vm2"] == {"cpu": 0.001} and d.bids["a/vm1"] == {"cpu": 0.5}
    d = ctl.decide(obs(40.0))  # idle for 30 s: released
    assert d.release == ("a/vm2",) and d.nvms == 1
    # wanted again before its time: its clock starts over
    ctl2 = KeepIdle(Shrink(at=10.0), keep_idle=30.0)  # type: ignore[arg-type]
    ctl2.decide(obs(10.0))
    ctl2.inner.at = 1e9  # type: ignore[attr-defined]
    assert ctl2.decide(obs(20.0)).release == () and ctl2.idle_since == {}


def test_keep_idle_goes_to_a_policy_that_knows_it_else_wraps_the_controller() -> None:
    base = ("name: f\ncontroller: {policy: %s}\nbudget: 1\nkeep_idle: %s\n"
            "clusters: [{name: m, command: 'true'}]\n")
    fw = with_keep_idle(parse(base % ("framework-horizontal", 45)), make_controller)
    assert not isinstance(fw, KeepIdle) and fw.keep_idle == 45  # type: ignore[attr-defined]
    hd = with_keep_idle(parse(base % ("horizontal-deadline", 45)), make_controller)
    assert isinstance(hd, KeepIdle) and hd.keep_idle == 45 and hd.name == "horizontal-deadline"
    assert not isinstance(with_keep_idle(parse(base % ("horizontal-deadline", 0)),
                                         make_controller), KeepIdle)


# --- live: every cluster's monitor, poll, heartbeat ----------------------------------------


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[Manager]:
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25,
                      backend={"cgroup_root": str(tmp_path / "no-cgroups"), "max_restarts": 1})
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    m = Manager(cfg, store, make_backend(cfg))
    yield m
    m.close()


TWO = """\
name: two
controller: {policy: best-effort}
budget: 10
clusters:
  - name: master
    command: "for i in $(seq 1 400); do echo it $i/400; sleep 0.05; done"
    cpu: 0.5
    memory: 64
    monitor: {kind: log, regex: 'it (?P<work_done>\\d+)/(?P<work_total>\\d+)'}
  - name: workers
    depends: master
    command: "i=0; while true; do i=$((i+1)); echo $i > done.txt; sleep 0.05; done"
    cpu: 0.5
    memory: 64
    poll: 2
    monitor: {kind: command, command: "echo x >> polls; echo work_done=$(cat done.txt) work_total=1000"}
  - name: quiet
    depends: master
    command: "sleep 600"
    cpu: 0.5
    memory: 64
    poll: 0
    monitor: {kind: command, command: "echo x >> never"}
"""


def run(m: Manager, seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        m.admit()
        m.tick()
        time.sleep(0.2)


def test_every_clusters_monitor_is_read_at_its_poll_and_aggregated(manager: Manager,
                                                                   tmp_path: Path) -> None:
    m = manager  # (each VM's files in its own working directory: it runs as alice)
    home = m.tenants.identity("alice").home
    polls, never = home / "work/two/workers-0/polls", home / "work/two/quiet-0/never"
    m.submit("alice", parse(TWO))
    run(m, 6.0)
    live = m.live["two"]
    master, workers = live.tracker.metrics(), live.others["workers"].metrics()
    assert master.work_total == 400 and workers.work_total == 1000
    assert 0 < master.work_done < 400 and workers.work_done > 0
    seen = m.backend.metrics_of["two"]  # what the controller sees
    assert seen.work_total == 1400
    assert seen.work_done == master.work_done + workers.work_done
    # the workers' command monitor every 2 s (poll), not every 0.5 s period: 2 to 4 runs
    assert 2 <= len(polls.read_text().splitlines()) <= 4
    assert not never.exists()  # poll: 0: never read
    assert "quiet" not in live.others
    from merkat.service.status import clusters_status

    rows = {c["name"]: c for c in clusters_status(m, m.store.platform("two"), None)}
    assert rows["master"]["work_total"] == 400 and rows["workers"]["poll"] == 2
    assert rows["quiet"]["monitor"] == "command" and rows["quiet"]["work_done"] is None
    assert [rows[c]["vms"] for c in ("master", "workers", "quiet")] == [1, 1, 1]


STALL = """\
name: hang
controller: {policy: best-effort}
budget: 10
health: {stall_s: 1.5}
clusters:
  - name: main
    command: "echo starts >> starts; echo it 1/10; sleep 600"
    cpu: 0.5
    memory: 64
    monitor: {kind: log, regex: 'it (?P<work_done>\\d+)/(?P<work_total>\\d+)'}
"""


def test_a_stalled_vm_is_restarted_up_to_max_restarts_then_fails(manager: Manager,
                                                                 tmp_path: Path) -> None:
    m = manager
    starts = m.tenants.identity("alice").home / "work/hang/main-0/starts"
    m.submit("alice", parse(STALL))
    end = time.monotonic() + 20
    while time.monotonic() < end and m.store.platform("hang").state not in ("failed",):
        run(m, 0.5)
    events = [(e["kind"], e["message"]) for e in m.store.events(limit=1000)
              if e["platform"] == "hang"]
    stalls = [msg for kind, msg in events if kind == "vm-stalled"]
    assert len(stalls) == 2, events  # once restarted (max_restarts 1), then failed
    assert stalls[0] == ("hang/vm1: no progress for 1.5 s (cluster main's monitor): killed: "
                         "it is restarted as a failed VM")
    assert any(kind == "vm-restart" for kind, _ in events)
    assert len(starts.read_text().splitlines()) == 2  # started, restarted once
    assert m.store.platform("hang").state == "failed"


class Halve(Controller):
    """Starts its VMs, then from its ``at``-th decision keeps one (releases the rest)."""

    name = "halve"

    def __init__(self, *, at: int = 3) -> None:
        super().__init__()
        self.n, self.at = 0, at

    def decide(self, obs: Observation) -> Demand:
        self.n += 1
        if obs.phase is Phase.WAITING:
            return self.on_start(obs)
        return resize(obs, 1 if self.n >= self.at else len(obs.vms), {"cpu": 0.2,
                                                                         "memory": 0.01})

    def reconfigure(self, obs: Observation) -> Demand:
        return self.decide(obs)


class _EP:
    name = "halve"
    group = "merkat.controllers"

    def load(self) -> type[Controller]:
        return Halve


PAIR = """\
name: pair
controller: {policy: halve}
budget: 10
keep_idle: %s
clusters:
  - name: main
    command: "sleep 600"
    count: 2
    cpu: 0.5
    memory: 64
"""


def test_keep_idle_live_the_released_vm_runs_that_long_then_goes(
        manager: Manager, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [_EP()] if kw.get(
        "group") == "merkat.controllers" else real(**kw))
    m = manager
    m.submit("alice", parse(PAIR % 3))
    released = gone = None
    end = time.monotonic() + 20
    while time.monotonic() < end and gone is None:
        run(m, 0.3)
        ctl = m.platform.apps["pair"].controller
        if released is None and getattr(ctl, "idle_since", None):
            released = time.monotonic()
        if released is not None and "pair/vm2" not in m.backend.vms:
            gone = time.monotonic()
    assert released is not None and gone is not None
    assert 2.5 <= gone - released <= 10.0  # kept 3 s (to a period), then destroyed
    assert [vm.id for vm in m.platform.apps["pair"].vms] == ["pair/vm1"]
