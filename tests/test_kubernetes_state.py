"""State that survives suspension and migration on the Kubernetes backend (a cluster's
``state:``), on the emulator, whose containers run commands for real and lose their files with
their pod: a counter the application keeps in its working directory continues from where it was
after a suspension and a resumption and after a migration (checkpoint in the old pod, the VM's
claim, restore in the new one); without ``state:`` it starts again from zero, and ``platform
show`` says a suspension is destructive."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.kubernetes import KubernetesBackend
from merkat.backends.kubernetes.emulator import KubeEmulator, emulated_client
from merkat.backends.kubernetes.live import KubernetesLive
from merkat.backends.kubernetes.objects import pod_name
from merkat.backends.local import Launch
from merkat.core.backend import Plan, VMPlacement
from merkat.service.templates import TemplateError, parse
from test_kubernetes_recovery import manager

APP1_POD = pod_name("app/vm1", "main")
S1_POD = pod_name("s/vm1", "main")
THRIFTY1_POD = pod_name("thrifty/vm1", "main")

pytestmark = pytest.mark.kubernetes

COUNT = 'n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo $n'
STATE = {"path": "/merkat/state", "size": "64Mi", "checkpoint": 'cp n "$MERKAT_STATE/n"',
         "restore": 'cp "$MERKAT_STATE/n" . 2>/dev/null || true', "timeout": 5, "grace": 2}
VM = "app/vm1"


def setup(tmp_path: Path, state: dict[str, Any] | None) -> tuple[KubeEmulator, KubernetesLive]:
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "4", "8Gi")
    emu.add_node("node-1", "4", "8Gi")
    kube = KubernetesBackend(emulated_client(emu, "merkat"), namespace="merkat",
                             sleep=lambda s: None)
    live = KubernetesLive(kube, logs=tmp_path / "logs")
    live.register("app", lambda app, vm, i: Launch("sleep 1000", "main", i, state=state))
    live.apply(Plan(0.0, 40.0, create=(VMPlacement(VM, "app", 0),),
                    allocations={VM: {"cpu": 1.0}}))
    return emu, live


def count(live: KubernetesLive) -> int:
    r = live.exec_in(VM, COUNT)
    assert r.ok, r.problem()
    return int(r.stdout.strip())


def suspend_resume_migrate(emu: KubeEmulator, live: KubernetesLive) -> list[int]:
    """Counts 3 times, suspends, resumes on node-1, migrates back to node-0, counting after
    each. With ``state:`` a suspension or a migration is noticed a period ahead (notice.py):
    the pod stops in the period after the one that planned it."""
    seen = [count(live), count(live), count(live)]
    one = {VM: {"cpu": 1.0}}
    live.apply(Plan(40.0, 40.0, suspend=(VM,)))
    live.apply(Plan(80.0, 40.0))
    assert emu.pods == {}
    live.apply(Plan(120.0, 40.0, resume=(VMPlacement(VM, "app", 1),), allocations=one))
    assert all(r.error is None for r in live.report), live.report
    seen.append(count(live))
    live.apply(Plan(160.0, 40.0, migrate=((VM, 1, 0),), allocations=one))
    live.apply(Plan(200.0, 40.0, allocations=one))
    assert emu.pod("merkat", APP1_POD)["spec"]["nodeName"] == "node-0"
    seen.append(count(live))
    return seen


def test_a_counter_continues_across_suspension_and_migration_with_state(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, STATE)
    pod = emu.pod("merkat", APP1_POD)
    (c,) = pod["spec"]["containers"]
    assert c["volumeMounts"] == [{"name": "merkat-state", "mountPath": "/merkat/state"},
                                 {"name": "merkat-notice", "mountPath": "/etc/merkat",
                                  "readOnly": True}]
    assert {"name": "MERKAT_STATE", "value": "/merkat/state"} in c["env"]
    assert {"name": "MERKAT_NOTICE", "value": "/etc/merkat"} in c["env"]
    assert pod["spec"]["volumes"] == [
        {"name": "merkat-state", "persistentVolumeClaim": {"claimName": APP1_POD + "-state"}},
        {"name": "merkat-notice", "downwardAPI": {"items": [{
            "path": "annotations", "fieldRef": {"fieldPath": "metadata.annotations"}}]}}]
    assert pod["spec"]["initContainers"][0]["command"] == ["/bin/sh", "-c", STATE["restore"]]
    assert pod["spec"]["terminationGracePeriodSeconds"] == 2
    assert emu.claims[("merkat", APP1_POD + "-state")]["spec"]["resources"] == {
        "requests": {"storage": "64Mi"}}
    assert suspend_resume_migrate(emu, live) == [1, 2, 3, 4, 5]  # not from zero
    checkpoints = [e.argv[-1] for e in emu.execs if STATE["checkpoint"] in e.argv[-1]]
    assert len(checkpoints) == 2  # before the suspension, before the migration
    deletes = [c for c in emu.calls if c.verb == "DELETE" and c.path.endswith(f"/pods/{APP1_POD}")]
    assert [c.query.get("gracePeriodSeconds") for c in deletes] == ["2", "2"]
    assert [c.verb for c in emu.calls if "persistentvolumeclaims" in c.path] == ["POST"]
    live.apply(Plan(240.0, 40.0, destroy=(VM,)))
    assert emu.pods == {} and emu.claims == {}  # a destroyed VM's state goes with it
    assert emu.schema_errors == []
    import yaml

    from test_kubernetes_access import _rbac_verb

    deploy = Path(__file__).parent.parent / "deploy" / "kubernetes"
    for f in ("rbac.yaml", "rbac-per-user.yaml"):  # the shipped roles grant the claims' calls
        granted = {(r, v) for doc in yaml.safe_load_all((deploy / f).read_text())
                   if doc["kind"] in ("Role", "ClusterRole") for rule in doc["rules"]
                   for r in rule["resources"] for v in rule["verbs"]}
        assert {_rbac_verb(c.verb, c.path)[:2] for c in emu.calls
                if "persistentvolumeclaims" in c.path} <= granted


def test_without_state_the_counter_starts_again_and_show_says_so(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, None)
    assert suspend_resume_migrate(emu, live) == [1, 2, 3, 1, 1]
    assert emu.claims == {} and "volumes" not in emu.pod("merkat", APP1_POD)["spec"]
    t = {"clusters": [{"name": "main", "command": "x"}]}
    assert live.suspension(t)["keeps_state"] is False
    assert live.suspension(t)["note"].endswith("lost (no state: section)")
    t["clusters"][0]["state"] = STATE
    assert live.suspension(t)["keeps_state"] is True


def test_a_failed_checkpoint_is_reported_and_the_pod_still_goes(tmp_path: Path) -> None:
    emu, live = setup(tmp_path, {**STATE, "checkpoint": "echo disk full >&2; exit 3",
                                 "notice_s": 0})
    live.apply(Plan(40.0, 40.0, suspend=(VM,)))
    assert emu.pods == {}  # notice_s 0: stopped at once
    live.apply(Plan(80.0, 40.0))
    assert [(r.op, r.error) for r in live.report] == [
        ("checkpoint", "checkpoint failed: exit status 3: disk full")]


def test_the_state_section_is_validated_and_reaches_the_pod(tmp_path: Path) -> None:
    base = ("name: s\ncontroller: {policy: best-effort}\nbudget: 10\nclusters:\n"
            "  - name: main\n    command: exec sleep 600\n    cpu: 0.5\n    memory: 64\n")
    for bad, field in (("{path: state}", "clusters.0.state.path"),
                       ("{size: lots}", "clusters.0.state.size"),
                       ("{timeout: 0}", "clusters.0.state.timeout"),
                       ("{volume: x}", "clusters.0.state.volume")):
        with pytest.raises(TemplateError, match=field.replace(".", r"\.")):
            parse(base + f"    state: {bad}\n", "s.yaml")
    emu = KubeEmulator()
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "4", "8Gi")
    m = manager(tmp_path, emu)
    m.store.add_user("alice", budget=100_000_000)
    m.submit("alice", parse(base + "    state: {size: 2Gi, restore: 'true'}\n", "s.yaml"))
    m.admit()
    m.tick()
    pod = emu.pod("merkat", S1_POD)
    assert pod["status"]["phase"] == "Running" and pod["spec"]["volumes"]
    assert emu.claims[("merkat", S1_POD + "-state")]["spec"]["resources"]["requests"] == {
        "storage": "2Gi"}
    m.close()


THRIFTY = """\
name: {name}
controller: {{policy: best-effort, params: {{max_price: {limit}}}}}
budget: {budget}
clusters:
  - name: main
    command: exec sleep 600
    cpu: 1
    memory: 64
"""


@pytest.mark.parametrize("keep", [True, False])
def test_the_service_suspends_and_resumes_a_platform_keeping_its_counter(
        tmp_path: Path, keep: bool) -> None:
    """Through the service: a best-effort platform with a price limit is suspended when
    another platform raises the price and resumed when it leaves; its counter continues with
    ``state:`` (4 after 3) and starts again without (1)."""
    emu = KubeEmulator(exec_dir=str(tmp_path / "containers"))
    emu.namespaces.add("merkat")
    emu.add_node("node-0", "1", "4Gi")
    m = manager(tmp_path, emu)
    m.store.add_user("alice", budget=1_000_000_000)
    state = ("    state: {checkpoint: 'cp n \"$MERKAT_STATE/n\"', "
             "restore: 'cp \"$MERKAT_STATE/n\" . 2>/dev/null || true'}\n") if keep else ""
    m.submit("alice", parse(THRIFTY.format(name="thrifty", limit=0.0015, budget=10) + state,
                            "t.yaml"))
    m.admit()
    m.tick()
    m.tick()

    def tick_count() -> int:
        r = m.backend.exec_in("thrifty/vm1", COUNT)  # type: ignore[attr-defined]
        assert r.ok, r.problem()
        return int(r.stdout.strip())

    assert [tick_count() for _ in range(3)] == [1, 2, 3]
    m.submit("alice", parse(THRIFTY.format(name="urgent", limit=1, budget=500), "u.yaml"))
    m.admit()
    m.tick()
    m.tick()  # the price doubled: thrifty's controller suspends it
    assert m.platform.apps["thrifty"].status.value == "suspended"
    if keep:  # noticed: its pod stops a period (0.5 s) later
        pod = emu.pod("merkat", THRIFTY1_POD)
        assert "merkat.io/preempt-at" in pod["metadata"]["annotations"]
        time.sleep(0.5)
        m.tick()
    assert ("merkat", THRIFTY1_POD) not in emu.pods
    m.stop("urgent")
    m.tick()
    m.tick()  # the price fell back: resumed, its pod created again
    assert m.platform.apps["thrifty"].status.value == "running"
    assert tick_count() == (4 if keep else 1)
    m.close()
