"""The local backend: cgroup v1/v2 behind one interface (fake trees), and the real kernel as
root (a CPU hog is throttled to its quota, frozen, moved between nodes' cpusets)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from merkat.backends.local import Launch, LocalBackend, Node, wait_for
from merkat.backends.local.cgroups import CgroupTree, Limits, Version, detect
from merkat.core.backend import Plan, VMPlacement

V1_FILES = {
    "cpu": ["cgroup.procs", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares"],
    "memory": ["cgroup.procs", "memory.limit_in_bytes"],
    "cpuset": ["cgroup.procs", "cpuset.cpus", "cpuset.mems"],
    "freezer": ["cgroup.procs", "freezer.state"],
}


def fake_v1(root: Path, groups: list[str]) -> None:
    """A v1 hierarchy as the kernel would show it for ``groups`` (the kernel creates the
    control files of a new group; the fake creates them in advance)."""
    for ctl, files in V1_FILES.items():
        for g in ["", *groups]:
            d = root / ctl / g
            d.mkdir(parents=True, exist_ok=True)
            for f in files:
                (d / f).touch()
        (root / ctl / "cpuset.cpus").write_text("0-3") if ctl == "cpuset" else None
        (root / ctl / "cpuset.mems").write_text("0") if ctl == "cpuset" else None


def fake_v2(root: Path, groups: list[str]) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory cpuset io")
    (root / "cgroup.subtree_control").write_text("")
    for g in groups:
        d = root / g
        d.mkdir(parents=True, exist_ok=True)
        for f in ("cgroup.procs", "cpu.max", "cpu.weight", "memory.max", "cpuset.cpus", "cgroup.freeze",
                  "cgroup.controllers", "cgroup.subtree_control"):
            (d / f).touch()
        (d / "cgroup.controllers").write_text("cpu memory cpuset")


def test_detect_tells_v1_v2_and_none(tmp_path: Path) -> None:
    fake_v1(tmp_path / "a", [])
    fake_v2(tmp_path / "b", [])
    assert detect(tmp_path / "a") is Version.v1
    assert detect(tmp_path / "b") is Version.v2
    assert detect(tmp_path / "c") is None
    assert not CgroupTree(tmp_path / "c").enforced


def test_v1_limits_go_to_the_cfs_quota_memory_limit_cpuset_and_freezer(tmp_path: Path) -> None:
    fake_v1(tmp_path, ["merkat", "merkat/app", "merkat/app/vm1"])
    tree = CgroupTree(tmp_path)
    assert tree.version is Version.v1 and tree.controllers() == ("cpu", "cpuset", "freezer",
                                                                 "memory")
    assert tree.create("app/vm1") is None
    assert tree.set_limits("app/vm1", Limits(cpu=0.25, memory=100, cpus="1")) is None
    d = tmp_path / "cpu/merkat/app/vm1"
    assert (d / "cpu.cfs_quota_us").read_text() == "25000"
    assert (d / "cpu.cfs_period_us").read_text() == "100000"
    assert (d / "cpu.shares").read_text() == "256"  # the weight follows the allocation
    mem = tmp_path / "memory/merkat/app/vm1/memory.limit_in_bytes"
    assert mem.read_text() == str(100 * 2**20)
    assert (tmp_path / "cpuset/merkat/app/vm1/cpuset.cpus").read_text() == "1"
    assert tree.limits("app/vm1") == Limits(0.25, 100.0, "1")
    assert tree.freeze("app/vm1") is None and tree.frozen("app/vm1")
    assert tree.thaw("app/vm1") is None and not tree.frozen("app/vm1")
    assert tree.path("app/vm1") == "merkat/app/vm1"
    # A tiny allocation still gets the kernel's minimum quota (1 ms per 100 ms).
    assert tree.set_limits("app/vm1", Limits(cpu=1e-6)) is None
    assert (d / "cpu.cfs_quota_us").read_text() == "1000"


def test_v2_limits_go_to_cpu_max_memory_max_and_cgroup_freeze(tmp_path: Path) -> None:
    fake_v2(tmp_path, ["merkat", "merkat/app", "merkat/app/vm1"])
    tree = CgroupTree(tmp_path)
    assert tree.version is Version.v2 and tree.controllers() == ("cpu", "cpuset", "memory")
    assert tree.create("app/vm1") is None
    assert "+cpu" in (tmp_path / "cgroup.subtree_control").read_text()
    assert tree.set_limits("app/vm1", Limits(cpu=1.5, memory=64, cpus="0-1")) is None
    d = tmp_path / "merkat/app/vm1"
    assert (d / "cpu.max").read_text() == "150000 100000"
    assert (d / "cpu.weight").read_text() == "150"
    assert (d / "memory.max").read_text() == str(64 * 2**20)
    assert tree.limits("app/vm1") == Limits(1.5, 64.0, "0-1")
    assert tree.set_limits("app/vm1", Limits()) is None
    assert (d / "cpu.max").read_text() == "max 100000"
    assert tree.freeze("app/vm1") is None and (d / "cgroup.freeze").read_text() == "1"


def test_errors_come_back_as_data(tmp_path: Path) -> None:
    fake_v1(tmp_path, ["merkat"])
    tree = CgroupTree(tmp_path)
    # A group that does not exist: every write fails, reported as one line each.
    assert "cannot write" in (tree.set_limits("nope", Limits(cpu=1.0)) or "")


def test_backend_without_cgroups_runs_unenforced_with_one_warning(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs",
                     cgroup_root=tmp_path / "none")
    assert not b.enforced and b.warning and "unenforced" in b.warning
    b.register("a", lambda app, vm, i: Launch("echo hello $MERKAT_PLATFORM $MERKAT_INDEX"))
    b.apply(Plan(0.0, 1.0, create=(VMPlacement("a/vm1", "a", 0),),
                 allocations={"a/vm1": {"cpu": 0.5}}))
    assert [r.ok for r in b.report] == [True]
    b.monitored["a"] = "a/vm1"
    assert wait_for(lambda: bool(b.poll()) or b.finished("a"), 5)
    assert b.finished("a")
    assert (tmp_path / "logs/a/vm1.log").read_text() == "hello a 0\n"
    b.apply(Plan(0.0, 1.0, create=(VMPlacement("b/vm1", "b", 0),)))
    assert "no launcher" in (b.report[0].error or "")
    b.close()


def test_a_failed_process_is_restarted_a_bounded_number_of_times(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none",
                     max_restarts=2)
    b.register("a", lambda app, vm, i: Launch("exit 3"))
    b.apply(Plan(0.0, 1.0, create=(VMPlacement("a/vm1", "a", 0),)))
    ops: list[str] = []
    wait_for(lambda: bool(ops.extend(f"{r.op}:{r.error}" for r in b.poll()))
             or b.vms["a/vm1"].state == "failed", 10)
    assert [o.split(":")[0] for o in ops] == ["restart", "restart", "exit"]
    assert "code 3 after 2 restarts" in ops[-1]
    b.close()


def _cpu_usage(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9 if (
        group / "cpuacct.usage").exists() else float("nan")


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_real_cgroups_throttle_a_cpu_hog_freeze_it_and_move_it(tmp_path: Path) -> None:
    prefix = f"merkat-test-{uuid.uuid4().hex[:8]}"
    cpus = sorted(os.sched_getaffinity(0))
    nodes = [Node("n0", str(cpus[0]), 1.0, 1024.0), Node("n1", str(cpus[-1]), 1.0, 1024.0)]
    b = LocalBackend(nodes, tmp_path, prefix=prefix)
    assert b.enforced, b.warning
    # The tree weighs its allocatable cores (docs/service.md): on a machine loaded by other
    # work the hog would get less than its quota and never be throttled. This test is about
    # the quota, so the tree outweighs the rest here.
    assert b.tree.limits("").cpu == pytest.approx(b.capacity.allocatable_cpu)
    b.tree.set_weight("", 64.0)
    hog = "exec python3 -c 'while True: pass'"
    b.register("hog", lambda app, vm, i: Launch(hog, memory_floor=16))
    try:
        b.apply(Plan(0.0, 1.0, create=(VMPlacement("hog/vm1", "hog", 0),),
                     allocations={"hog/vm1": {"cpu": 0.2, "memory": 128.0}}))
        assert all(r.ok for r in b.report), b.report
        lim = b.limits("hog/vm1")
        assert lim == Limits(0.2, 128.0, str(cpus[0]))
        pid = b.vms["hog/vm1"].proc.pid  # type: ignore[union-attr]
        group = b.tree.dirs("hog/vm1")
        cpu_dir = group.get("cpu") or group["unified"]
        assert pid in b.tree.pids("hog/vm1")
        # Throttled: over 1.5 s of wall time the hog gets ~0.2 s of CPU, never a full core.
        start = time.monotonic()
        used0 = _stat_usage(b, "hog/vm1")
        time.sleep(1.5)
        used = _stat_usage(b, "hog/vm1") - used0
        elapsed = time.monotonic() - start
        assert used < 0.45 * elapsed, (used, elapsed)
        assert "nr_throttled" in (cpu_dir / "cpu.stat").read_text()
        throttled = dict(line.split() for line in (cpu_dir / "cpu.stat").read_text().splitlines())
        assert int(throttled["nr_throttled"]) > 0
        # The quota follows the allocation.
        b.apply(Plan(1.0, 1.0, allocations={"hog/vm1": {"cpu": 0.8, "memory": 128.0}}))
        assert b.limits("hog/vm1").cpu == 0.8
        # Migration: the running VM's cpuset becomes the other node's.
        b.apply(Plan(2.0, 1.0, migrate=(("hog/vm1", 0, 1),),
                     allocations={"hog/vm1": {"cpu": 0.8, "memory": 128.0}}))
        assert b.limits("hog/vm1").cpus == str(cpus[-1])
        assert b.vms["hog/vm1"].proc.poll() is None  # type: ignore[union-attr]
        # Frozen: no CPU used while suspended; progresses again on resume.
        b.apply(Plan(3.0, 1.0, suspend=("hog/vm1",)))
        assert wait_for(lambda: b.tree.frozen("hog/vm1"), 2)
        u0 = _stat_usage(b, "hog/vm1")
        time.sleep(0.5)
        assert _stat_usage(b, "hog/vm1") - u0 < 0.02
        b.apply(Plan(4.0, 1.0, resume=(VMPlacement("hog/vm1", "hog", 1),)))
        assert not b.tree.frozen("hog/vm1")
        u1 = _stat_usage(b, "hog/vm1")
        # (within seconds: the tree weighs its allocatable cores, not more than the machine's
        # other work, so on a loaded machine it waits its turn)
        assert wait_for(lambda: _stat_usage(b, "hog/vm1") - u1 > 0.05, 5)
    finally:
        b.close()
    assert not b.tree.exists("hog/vm1")
    assert not any(d.exists() for d in b.tree.dirs("").values())


def _stat_usage(b: LocalBackend, vm: str) -> float:
    """CPU seconds used by the VM's processes (from /proc, which works on v1 and v2)."""
    total = 0
    for pid in b.tree.pids(vm):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _sleeper() -> subprocess.Popen[bytes]:
    """A process in its own session, as a VM of a killed server is (the test plays the
    kernel's part: it writes the pid into a fake group's cgroup.procs)."""
    return subprocess.Popen(["sleep", "600"], start_new_session=True)


def test_adopt_takes_back_a_live_group_and_restarts_an_empty_one(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    fake_v1(cg, ["merkat", "merkat/a", "merkat/a/vm1", "merkat/a/vm2", "merkat/b",
                 "merkat/b/vm1"])
    nodes = [Node("n0", "0", 1.0, 512.0), Node("n1", "1", 1.0, 512.0)]
    b = LocalBackend(nodes, tmp_path / "logs", cgroup_root=cg)
    staged: list[str] = []
    b.register("a", lambda app, vm, i: Launch("exec sleep 600", index=i,
                                              setup=lambda: staged.append(vm)))
    old = _sleeper()
    orphan = _sleeper()
    try:
        (cg / "cpu/merkat/a/vm1/cgroup.procs").write_text(f"{old.pid}\n")
        (cg / "cpu/merkat/b/vm1/cgroup.procs").write_text(f"{orphan.pid}\n")
        r = b.adopt("a/vm1", "a", 1, 0, {"cpu": 0.25, "memory": 64.0})
        assert (r.op, r.error) == ("adopt", None)
        d = b.describe("a/vm1") or {}
        assert (d["pid"], d["process"], d["node"], d["adopted"]) == (old.pid, "running", "n1",
                                                                      True)
        # its allocation and node written again: quota, memory limit, cpuset
        assert b.tree.limits("a/vm1") == Limits(0.25, 64.0, "1")
        assert b.poll() == []  # still running: nothing to report
        # vm2's group is empty: started again (files not staged in again), on its node
        r = b.adopt("a/vm2", "a", 0, 1, {"cpu": 0.5})
        assert (r.op, r.error) == ("restart", None) and staged == []
        p2 = b.vms["a/vm2"]
        assert p2.proc is not None and p2.pid == p2.proc.pid and not p2.adopted
        assert p2.launch.index == 1 and b.tree.limits("a/vm2").cpu == 0.5
        # the orphan group (no platform) is destroyed: its process killed
        assert b.reap_orphans() == ["b/vm1"]
        assert orphan.wait(5) < 0
        # the adopted process ends: not our child, seen through its group; its wrapper's
        # exit status (here: none, it was killed) makes it a failure, restarted
        old.kill()
        old.wait()
        (cg / "cpu/merkat/a/vm1/cgroup.procs").write_text("")  # as the kernel does
        b.monitored["a"] = "a/vm1"
        (out,) = b.poll()
        assert (out.op, out.vm) == ("restart", "a/vm1") and b.vms["a/vm1"].proc is not None
        assert b.vms["a/vm1"].restarts == 1 and not b.finished("a")
    finally:
        for p in (old, orphan):
            p.kill()
            p.wait()
        b.close()


def test_an_adopted_vm_whose_wrapper_wrote_status_0_has_finished(tmp_path: Path) -> None:
    cg = tmp_path / "cg"
    fake_v2(cg, ["merkat", "merkat/a", "merkat/a/vm1"])
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs", cgroup_root=cg)
    b.register("a", lambda app, vm, i: Launch("exec sleep 600", index=i))
    b.monitored["a"] = "a/vm1"
    old = _sleeper()
    try:
        (cg / "merkat/a/vm1/cgroup.procs").write_text(f"{old.pid}\n")
        (cg / "merkat/a/vm1/cgroup.freeze").write_text("1")  # frozen: it was suspended
        r = b.adopt("a/vm1", "a", 0, 0)
        assert r.op == "adopt-frozen" and b.vms["a/vm1"].state == "suspended"
        assert b.poll() == []  # a suspended VM is not polled
        b.apply(Plan(0.0, 1.0, resume=(VMPlacement("a/vm1", "a", 0),)))
        assert (cg / "merkat/a/vm1/cgroup.freeze").read_text() == "0"
        exit_file = b.vms["a/vm1"].exit_file
        exit_file.parent.mkdir(parents=True)
        exit_file.write_text("0\n")  # what the VM's wrapper writes at its end
        old.kill()
        old.wait()
        (cg / "merkat/a/vm1/cgroup.procs").write_text("")  # as the kernel does
        assert [(o.op, o.error) for o in b.poll()] == [("exit", None)]
        assert b.finished("a")
    finally:
        old.kill()
        old.wait()
        b.close()


def test_each_vm_runs_under_a_wrapper_that_records_its_exit_status(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none")
    b.register("a", lambda app, vm, i: Launch("exit 7"))
    b.apply(Plan(0.0, 1.0, create=(VMPlacement("a/vm1", "a", 0),)))
    p = b.vms["a/vm1"]
    assert p.proc is not None and p.proc.wait(5) == 7
    assert p.exit_file.read_text() == "7\n" and p.pid == p.proc.pid
    b.close()


CANNOT_START = [  # (how the VM starts, what the report says)
    (Launch("sleep 60\0x"), "embedded null byte"),  # ValueError from Popen
    (Launch("sleep 60", env={"MERKAT_X": "a\0b"}), "embedded null byte"),
    (Launch("sleep 60", user_env={"A=B": "x"}), "illegal environment variable name"),
    (Launch("sleep 60", env={"MERKAT_X": 1}), "expected str"),  # type: ignore[dict-item]  # TypeError
    (Launch("sleep 60", cwd="/nonexistent/merkat-test"), "Exception occurred in preexec_fn"),
    (Launch("sleep 60"), "File exists"),  # the logs directory is a file (OSError from mkdir)
]


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
@pytest.mark.parametrize(("launch", "why"), CANNOT_START)
def test_a_vm_that_cannot_start_is_data_and_leaves_no_cgroup(tmp_path: Path, launch: Launch,
                                                            why: str) -> None:
    """Only ``OSError`` was caught when a VM's process started: a ``ValueError`` (a NUL in its
    command or environment) escaped ``apply`` and left the VM's cgroup behind, every retry
    another; a log directory that could not be made escaped too."""
    logs = tmp_path / "logs"
    if why == "File exists":
        logs.mkdir()
        (logs / "app").write_text("not a directory")
    cpus = sorted(os.sched_getaffinity(0))
    b = LocalBackend([Node("n0", str(cpus[0]), 1.0, 1024.0)], logs, max_restarts=1,
                     prefix=f"merkat-test-{uuid.uuid4().hex[:8]}")
    assert b.enforced, b.warning
    b.register("app", lambda app, vm, i: launch)
    try:
        for attempt in range(2):  # retried by the platform, then gone for good
            report = b.apply(Plan(float(attempt), 1.0, create=(VMPlacement("app/vm1", "app", 0),)))
            [op] = report.ops
            assert (op.op, op.ok) == ("create", False) and why in op.reason, op
            assert not any(d.exists() for d in b.tree.dirs("app/vm1").values())
            assert b.vm_ids() == []
        assert why in b.failed()["app/vm1"]
    finally:
        b.close()
    assert not any(d.exists() for d in b.tree.dirs("").values())


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                    reason="needs root and cgroups")
def test_a_restart_that_cannot_start_fails_the_vm_and_polling_goes_on(tmp_path: Path) -> None:
    """The health check restarts a VM that exited with an error through the same start: one
    that cannot start is failed (the manager fails its platform); ``poll`` does not raise."""
    from dataclasses import replace

    cpus = sorted(os.sched_getaffinity(0))
    b = LocalBackend([Node("n0", str(cpus[0]), 1.0, 1024.0)], tmp_path, max_restarts=2,
                     prefix=f"merkat-test-{uuid.uuid4().hex[:8]}")
    assert b.enforced, b.warning
    b.register("app", lambda app, vm, i: Launch("exit 3"))
    try:
        b.apply(Plan(0.0, 1.0, create=(VMPlacement("app/vm1", "app", 0),)))
        vm = b.vms["app/vm1"]
        assert wait_for(lambda: vm.proc is not None and vm.proc.poll() is not None, 10)
        vm.launch = replace(vm.launch, command="exit 3\0")
        [op] = b.poll()
        assert (op.op, op.ok) == ("restart", False) and "embedded null byte" in op.reason, op
        assert "restart failed: cannot start" in b.failed()["app/vm1"]
    finally:
        b.close()
    assert not any(d.exists() for d in b.tree.dirs("").values())
