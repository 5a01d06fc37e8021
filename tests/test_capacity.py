"""Reserved capacity (docs/service.md, "The local backend"): what the market sells, what the
VM tree is capped at, and a reserve that leaves nothing refused, naming the field."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from merkat.backends.local import LocalBackend, Node
from merkat.backends.local.capacity import Allocatable, Reserve, machine, reserve_nodes
from merkat.backends.local.cgroups import Limits
from merkat.service.config import ConfigError, load_config, server_identity

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src")}


def test_the_reserve_comes_out_of_the_nodes_in_proportion() -> None:
    alloc = Reserve(0.5, 512.0).check((2.0, 4096.0))
    assert (alloc.allocatable_cpu, alloc.allocatable_memory) == (1.5, 3584.0)
    assert alloc.limits() == Limits(cpu=1.5, memory=3584.0)
    split = reserve_nodes([Node("a", "0", 1.0, 2048.0), Node("b", "1", 1.0, 2048.0)], alloc)
    assert [(n.allocatable_cores, n.allocatable_memory) for n in split] == [(0.75, 1792.0)] * 2
    assert [(n.reserved_cores, n.reserved_memory) for n in split] == [(0.25, 256.0)] * 2
    # nodes that leave CPUs and memory out of the market already leave the reserve free
    (one,) = reserve_nodes([Node("a", "0", 1.0, 1024.0)], alloc)
    assert (one.allocatable_cores, one.allocatable_memory) == (1.0, 1024.0)


@pytest.mark.parametrize(("reserve", "field"), [(Reserve(2.0, 0.0), "reserve_cpu"),
                                                (Reserve(0.5, 4096.0), "reserve_memory"),
                                                (Reserve(-1.0, 0.0), "reserve_cpu")])
def test_a_reserve_that_leaves_nothing_is_refused(reserve: Reserve, field: str) -> None:
    with pytest.raises(ValueError, match=f"backend.{field}: "):
        reserve.check((2.0, 4096.0))


def test_the_market_sells_the_allocatable_and_the_api_says_so(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    from merkat.service.api import create_app
    from merkat.service.backends import make_backend
    from merkat.service.db import open_store
    from merkat.service.manager import Manager

    cores, memory = machine()
    cfg = load_config(None, data_dir=tmp_path, backend={
        "cgroup_root": str(tmp_path / "no-cgroups"), "reserve_cpu": 0.25, "reserve_memory": 100})
    assert cfg.backend.cgroup_prefix == f"merkat-{server_identity(tmp_path)}"
    store = open_store(cfg.database)
    key = store.add_user("alice")
    m = Manager(cfg, store, make_backend(cfg))
    assert m.platform.hosts.capacity[0, 0] == pytest.approx(cores - 0.25)
    assert m.platform.hosts.capacity[0, 1] == pytest.approx(memory - 100)
    with TestClient(create_app(m)) as c:
        nodes = c.get("/api/v1/nodes", headers={"Authorization": f"Bearer {key}"}).json()
    m.close()
    (n,) = nodes["items"]
    assert n["reserved"]["cpu"] == pytest.approx(0.25)
    assert n["allocatable"]["cpu"] == pytest.approx(cores - 0.25)
    assert nodes["machine"]["allocatable"] == {"cpu": cores - 0.25,
                                               "memory": round(memory - 100, 1)}
    assert nodes["machine"]["reserved"] == {"cpu": 0.25, "memory": 100.0}


def test_a_backend_built_bare_sells_the_whole_machine(tmp_path: Path) -> None:
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, cgroup_root=tmp_path / "none")
    assert b.capacity == Allocatable(*machine())
    assert b.nodes[0].allocatable_cores == 1.0


def test_a_reserve_too_large_is_bad_input_naming_the_field(tmp_path: Path) -> None:
    cores, _ = machine()
    with pytest.raises(ConfigError, match=r"backend\.reserve_cpu: .* leaves nothing"):
        load_config(None, data_dir=tmp_path, backend={"reserve_cpu": cores})
    r = subprocess.run([sys.executable, "-m", "merkat", "server", "--reserve-cpu", str(cores),
                        "--port", "0", "--data-dir", str(tmp_path / "new")],
                       capture_output=True, text=True, env=ENV, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("error: backend.reserve_cpu: ")
    assert not (tmp_path / "new").exists()  # nothing created


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_the_vm_tree_is_capped_at_the_allocatable_and_weighs_it(tmp_path: Path,
                                                                version: str) -> None:
    """The prefix group (the VMs together) holds the allocatable CPU as a CFS quota and as its
    weight (1024 shares / cpu.weight 100 per core, as Kubernetes' kubepods), and the
    allocatable memory as its limit — v1 and v2 files, on a fake hierarchy."""
    from test_local_backend import fake_v1, fake_v2

    cg = tmp_path / "cg"
    (fake_v1 if version == "v1" else fake_v2)(cg, ["mk"])
    cores, memory = machine()
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs", cgroup_root=cg,
                     prefix="mk", reserve=Reserve(0.5, 512.0))
    assert b.enforced
    quota = round((cores - 0.5) * 100_000)
    limit = str(round((memory - 512.0) * 2**20))
    if version == "v1":
        assert (cg / "cpu/mk/cpu.cfs_quota_us").read_text() == str(quota)
        assert (cg / "cpu/mk/cpu.shares").read_text() == str(round((cores - 0.5) * 1024))
        assert (cg / "memory/mk/memory.limit_in_bytes").read_text() == limit
    else:
        assert (cg / "mk/cpu.max").read_text() == f"{quota} 100000"
        assert (cg / "mk/cpu.weight").read_text() == str(round((cores - 0.5) * 100))
        assert (cg / "mk/memory.max").read_text() == limit
    got = b.tree.limits("")
    assert got.cpu == cores - 0.5 and got.memory == pytest.approx(memory - 512.0, abs=1e-3)
    # backend.tree_weight: the operator's choice of weight, the same cap
    LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs", cgroup_root=cg,
                 prefix="mk", reserve=Reserve(0.5, 512.0, weight=64.0))
    if version == "v1":
        assert (cg / "cpu/mk/cpu.shares").read_text() == str(64 * 1024)
    else:
        assert (cg / "mk/cpu.weight").read_text() == str(64 * 100)
    assert b.tree.limits("").cpu == cores - 0.5


@pytest.mark.root
@pytest.mark.skipif(os.geteuid() != 0 or not Path("/sys/fs/cgroup/cpu/cgroup.procs").exists(),
                    reason="needs root and cgroup v1")
def test_a_larger_reserve_after_a_restart_still_caps_the_tree(tmp_path: Path) -> None:
    """cgroup v1 refuses a parent's quota under a child's: a VM group left by a server with a
    smaller reserve (a quota of 1.9 cores) is lowered to the new cap, and the cap holds."""
    import uuid

    cores, _ = machine()
    if cores < 2:
        pytest.skip("needs 2 cores")
    prefix = f"merkat-cap-{uuid.uuid4().hex[:8]}"
    cpu = Path("/sys/fs/cgroup/cpu") / prefix
    (cpu / "app" / "vm1").mkdir(parents=True)
    try:
        (cpu / "app" / "vm1" / "cpu.cfs_quota_us").write_text(str(round((cores - 0.1) * 1e5)))
        b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path, prefix=prefix,
                         reserve=Reserve(0.5, 0.0))
        assert b.warning is None
        cap = str(round((cores - 0.5) * 1e5))
        assert (cpu / "cpu.cfs_quota_us").read_text().strip() == cap
        assert (cpu / "app" / "vm1" / "cpu.cfs_quota_us").read_text().strip() == cap
    finally:
        for d in (cpu / "app" / "vm1", cpu / "app", cpu):
            d.rmdir()
        for ctl in ("cpuacct", "memory", "cpuset", "freezer", "pids"):  # (all the backend's)
            with contextlib.suppress(OSError):
                (Path("/sys/fs/cgroup") / ctl / prefix).rmdir()
