"""Commands run inside pods (``pods/{name}/exec``) and monitors read through the pods, on the API
emulator: the exact request lightkube sends, the WebSocket channel framing, exit codes, stderr,
timeouts and refusals as data; a platform's command monitor and log monitor on the kubernetes
backend feeding its controller."""

from __future__ import annotations

import importlib.metadata
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from merkat.backends.kubernetes import KubernetesBackend, PodTemplate
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client, kubeconfig
from merkat.backends.kubernetes.emulator_http import serve
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.control.slo import BestEffort
from merkat.control.types import Demand, Metrics, Observation
from merkat.core.backend import Plan, VMPlacement
from merkat.service.monitors import read_in_vm
from merkat.service.templates import Monitor
from test_kubernetes_live_adapter import Launch  # what the service's launchers return

pytestmark = pytest.mark.kubernetes

NS = "merkat"


def running(tmp_path: Path, **kw: Any) -> tuple[KubeEmulator, KubernetesBackend, str]:
    """An emulated node with pod ``a/vm1`` running (env FOO=bar); its pod name."""
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"), **kw)
    emu.namespaces.add(NS)
    emu.add_node("node-0")
    b = KubernetesBackend(emulated_client(emu, NS), namespace=NS, sleep=lambda s: None)
    b.add_app("a", PodTemplate(env={"FOO": "bar"}))
    b.refresh()
    r = b.apply_report(Plan(0.0, 60.0, create=(VMPlacement("a/vm1", "a", 0),),
                            allocations={"a/vm1": {"cpu": 1.0}}))
    assert [o.ok for o in r.ops] == [True]
    b.refresh()
    return emu, b, b.pods["a/vm1"].name


def test_exec_is_a_websocket_get_on_the_exec_subresource_with_the_command_in_the_query(
        tmp_path: Path) -> None:
    emu, b, name = running(tmp_path)
    n0, c0 = len(emu.calls), b.api_calls
    r = b.exec("a/vm1", ["/bin/sh", "-c", "echo out $FOO; echo oops >&2; exit 3"])
    assert (r.stdout, r.stderr, r.exit_code, r.error) == ("out bar\n", "oops\n", 3, None)
    assert not r.ok and r.problem() == "exit status 3: oops"
    (call,) = emu.calls[n0:]
    assert (call.verb, call.path) == ("GET", f"/api/v1/namespaces/{NS}/pods/{name}/exec")
    # command is repeated (one per argv word; the record keeps the last), stdin is closed
    assert call.query == {"command": "echo out $FOO; echo oops >&2; exit 3",
                          "stdout": "true", "stderr": "true", "stdin": "true",
                          "container": "vm"}
    (x,) = emu.execs
    assert x.argv == ["/bin/sh", "-c", "echo out $FOO; echo oops >&2; exit 3"]
    assert (x.namespace, x.pod, x.container, x.protocol) == (NS, name, "vm", "v5.channel.k8s.io")
    assert b.api_calls == c0 + 1  # one API call per exec
    ok = b.exec("a/vm1", ["pwd"])  # in the container's working directory
    assert ok.ok and ok.stdout == f"{tmp_path / 'containers' / NS / name}\n"


def test_the_channel_framing_and_final_status_on_the_wire(tmp_path: Path) -> None:
    emu, _, name = running(tmp_path)
    url = f"https://kubernetes.emulator/api/v1/namespaces/{NS}/pods/{name}/exec"
    client = httpx2.Client(transport=emu.transport(),
                           headers={"authorization": "Bearer merkat-emulator-token"})
    params = [("command", "/bin/sh"), ("command", "-c"),
              ("command", "printf abc; printf xyz >&2; exit 7"),
              ("stdout", "true"), ("stderr", "true")]
    with client.websocket(url, params=params,
                          subprotocols=["v5.channel.k8s.io", "v4.channel.k8s.io"]) as ws:
        assert ws.subprotocol == "v5.channel.k8s.io"
        frames = []
        while True:
            msg = ws.receive_bytes(timeout=5)
            frames.append((msg[0], msg[1:]))
            if msg[0] == 3:
                break
    assert sorted(f for f in frames if f[0] != 3) == [(1, b"abc"), (2, b"xyz")]
    status = json.loads(frames[-1][1])
    assert status == {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                      "message": "command terminated with non-zero exit code: exit status 7",
                      "details": {"causes": [{"reason": "ExitCode", "message": "7"}]}}
    # A plain GET (no upgrade) is refused as the API server does.
    r = client.get(url, params=params)
    assert r.status_code == 400 and r.json()["message"] == "Upgrade request required"


def test_a_timeout_a_missing_or_finished_pod_and_a_missing_binary_come_back_as_data(
        tmp_path: Path) -> None:
    emu, b, name = running(tmp_path)
    t0 = time.monotonic()
    r = b.exec("a/vm1", ["/bin/sh", "-c", "sleep 30"], timeout=0.3)
    assert r.error == "timed out after 0.3 s" and r.exit_code is None
    assert time.monotonic() - t0 < 3.0
    deadline = time.monotonic() + 5
    while not emu.execs[-1].done and time.monotonic() < deadline:
        time.sleep(0.02)
    assert emu.execs[-1].done and emu.execs[-1].exit_code is None  # the process was killed
    r = b.exec("a/vm1", ["no-such-binary"])
    assert r.error is not None and r.error.startswith("500 InternalError: OCI runtime exec")
    assert 'exec: "no-such-binary": executable file not found in $PATH' in r.error
    assert b.exec("b/vm9", ["true"]).error == "no pod for b/vm9"
    emu.finish(NS, name, 0)
    r = b.exec("a/vm1", ["true"])
    assert r.error == ("400 BadRequest: cannot exec into a container in a completed pod; "
                       "current phase is Succeeded")
    del emu.pods[(NS, name)]  # deleted behind merkat's back
    assert b.exec("a/vm1", ["true"]).error == f'404 NotFound: pods "{name}" not found'
    emu.fail("GET", r"/exec$", 503)
    assert b.exec("a/vm1", ["true"]).error.startswith("503 ")  # type: ignore[union-attr]


def test_an_api_server_that_speaks_only_v4_works_too(tmp_path: Path) -> None:
    emu, b, _ = running(tmp_path, exec_protocols=("v4.channel.k8s.io",))
    r = b.exec("a/vm1", ["/bin/sh", "-c", "echo $FOO; exit 1"])
    assert (r.stdout, r.exit_code, r.error) == ("bar\n", 1, None)
    assert emu.execs[-1].protocol == "v4.channel.k8s.io"
    emu.exec_protocols = ("v3.channel.k8s.io",)
    assert b.exec("a/vm1", ["true"]).error.startswith("400 ")  # type: ignore[union-attr]


def test_exec_over_a_real_socket(tmp_path: Path) -> None:
    """The emulator served over TCP: httpx2's WebSocket stack against the relayed session."""
    from lightkube import Client, KubeConfig

    emu, b, _ = running(tmp_path)
    server = serve(emu.handle)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        b.client = Client(KubeConfig.from_dict(kubeconfig(NS, server.url)), trust_env=False)
        r = b.exec("a/vm1", ["/bin/sh", "-c", "head -c 100000 /dev/zero | tr '\\0' x; exit 4"])
        assert (len(r.stdout), set(r.stdout), r.exit_code) == (100_000, {"x"}, 4)
        assert b.exec("a/vm1", ["sleep", "30"], timeout=0.3).error == "timed out after 0.3 s"
    finally:
        server.shutdown()
        server.server_close()


def live_backend(tmp_path: Path) -> tuple[KubeEmulator, KubernetesLive]:
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add(NS)
    emu.add_node("node-0")
    kube = KubernetesBackend(emulated_client(emu, NS), namespace=NS, sleep=lambda s: None)
    return emu, KubernetesLive(kube, logs=tmp_path / "logs")


def test_monitors_read_inside_the_pod(tmp_path: Path) -> None:
    emu, live = live_backend(tmp_path)
    live.register("m", lambda app, vm, i: Launch("sleep 1000", "main", 0, {"STEP": "7"}))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement("m/vm1", "m", 0),),
                    allocations={"m/vm1": {"cpu": 1.0}}))
    live.kube.refresh()
    cmd = Monitor(kind="command", command='echo "work_done=$STEP work_total=70 junk"')
    assert read_in_vm(live, "m/vm1", cmd).values == {"work_done": 7.0, "work_total": 70.0}
    assert read_in_vm(live, None, cmd).values == {}  # its VM not started: nothing, not local
    name = live.kube.pods["m/vm1"].name
    emu.logs[(NS, name)] = "step 1/70\nstep 2/70\nstep 5/70\n"
    log = Monitor(kind="log", regex=r"step (?P<work_done>\d+)/(?P<work_total>\d+)")
    n0 = len(emu.calls)
    got = read_in_vm(live, "m/vm1", log)
    assert got is not None and got.values == {"work_done": 5.0, "work_total": 70.0}
    assert [(c.verb, c.path, c.query) for c in emu.calls[n0:]] == [
        ("GET", f"/api/v1/namespaces/{NS}/pods/{name}/log", {
            "container": "vm", "tailLines": "1000", "follow": "false", "timestamps": "false"})]
    (tmp_path / "containers" / NS / name / "progress.log").write_text("step 9/70\n")
    in_file = Monitor(kind="log", regex=log.regex, path="progress.log")
    got = read_in_vm(live, "m/vm1", in_file)
    assert got is not None and got.values == {"work_done": 9.0, "work_total": 70.0}
    assert emu.execs[-1].argv == ["/bin/sh", "-c", "exec </dev/null; tail -c 65536 progress.log"]
    eof = read_in_vm(live, "m/vm1", Monitor(kind="command", command="cat; echo work_done=1"))
    assert eof is not None and eof.values == {"work_done": 1.0}  # stdin at end-of-file
    bad = read_in_vm(live, "m/vm1", Monitor(kind="command", command="echo nope >&2; exit 2"))
    assert bad is not None and (bad.values, bad.error) == ({}, "exit status 2: nope")
    gone = read_in_vm(live, "m/vm2", log)
    assert gone is not None and gone.error == "no pod for m/vm2"


SEEN: list[Metrics] = []


class Recorder(BestEffort):
    name = "recorder"

    def decide(self, obs: Observation) -> Demand:
        SEEN.append(obs.metrics)
        return super().decide(obs)


class _EP:
    name = "recorder"
    group = "merkat.controllers"

    def load(self) -> type[BestEffort]:
        return Recorder


TEMPLATE = """\
name: mon
controller: {policy: recorder}
budget: 10
poll: 1
clusters:
  - name: main
    command: sleep 1000
    cpu: 1
    memory: 64
    monitor: %s
"""


@pytest.fixture
def service(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, KubeEmulator]]:
    """The applications manager on the kubernetes backend (the emulator), policy ``recorder``."""
    from merkat.service.config import load_config
    from merkat.service.db import open_store
    from merkat.service.manager import Manager

    real = importlib.metadata.entry_points
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda **kw: [_EP()] if kw.get(
        "group") == "merkat.controllers" else real(**kw))
    SEEN.clear()
    cfg = load_config(None, data_dir=tmp_path, period=0.5, admission=0.25)
    store = open_store(cfg.database)
    store.add_user("alice", budget=100_000_000)
    emu, live = live_backend(tmp_path)
    m = Manager(cfg, store, live)
    try:
        yield m, emu
    finally:
        m.close()


def monitor_errors(m: Any) -> list[str]:
    return [e["message"] for e in m.store.events() if e["kind"] == "monitor-error"]


@pytest.mark.parametrize("monitor, expect", [
    # runs with the pod's environment (MERKAT_VM is not set on this machine)
    ('{kind: command, command: "test $MERKAT_VM = mon/vm1 && echo work_done=42 work_total=100"}',
     (42.0, 100.0)),
    (r"{kind: log, regex: 'done (?P<work_done>\d+) of (?P<work_total>\d+)'}", (3.0, 9.0)),
])
def test_a_platforms_monitor_on_kubernetes_reaches_its_controller(
        service: tuple[Any, KubeEmulator], monitor: str, expect: tuple[float, float]) -> None:
    from merkat.service.templates import parse

    m, emu = service
    m.submit("alice", parse(TEMPLATE % monitor))
    m.admit()
    for _ in range(8):
        m.tick()
        for key in emu.pods:
            emu.logs[key] = "done 1 of 9\ndone 3 of 9\n"
        if SEEN and (SEEN[-1].work_done, SEEN[-1].work_total) == expect:
            break
    assert emu.pods, "the platform's pod was created"
    assert (SEEN[-1].work_done, SEEN[-1].work_total) == expect
    assert monitor_errors(m) == []


def test_a_failing_monitor_is_one_event_and_the_loop_goes_on(
        service: tuple[Any, KubeEmulator]) -> None:
    from merkat.service.templates import parse

    m, emu = service
    m.submit("alice", parse(TEMPLATE % '{kind: command, command: "echo broken >&2; exit 2"}'))
    m.admit()
    for _ in range(6):  # (a command monitor runs at most once a second: poll >= 1)
        m.tick()
        time.sleep(0.4)
    assert len([x for x in emu.execs if x.argv[-1].endswith("exit 2")]) >= 2
    assert monitor_errors(m) == ["monitor of mon: exit status 2: broken"]
    assert m.store.platform("mon").state == "running"  # type: ignore[union-attr]
