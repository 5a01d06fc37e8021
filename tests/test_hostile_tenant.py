"""Hostile tenants (issue 25 items 1, 6, 7, 9, 10, 16): a user's commands run as her own
unprivileged uid, in her VM's cgroup, with a clean environment; she reads nothing of the data
directory, copies in only her own files, cannot fork-bomb the machine, and a VM that leaves its
cgroup is noticed. Real cgroups and identity switching: root only."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from merkat.backends.local import Launch, LocalBackend, Node
from merkat.backends.local.cgroups import detect
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.server import Service

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                       reason="needs root and cgroups"),
]

SECRET = "hunter2-server-secret-4f1c"


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Api:
    def __init__(self, url: str, key: str) -> None:
        self.url, self.key = url, key

    def call(self, method: str, path: str, body: bytes | None = None,
             ctype: str = "application/yaml", timeout: float = 10.0) -> tuple[int, Any]:
        req = urllib.request.Request(f"{self.url}/api/v1{path}", data=body, method=method)
        req.add_header("Authorization", f"Bearer {self.key}")
        if body is not None:
            req.add_header("Content-Type", ctype)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as exc:
            return exc.code, json.loads(exc.read() or b"null")


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """A server whose data directory is in a directory others may traverse (so a denial is
    the data directory's own mode, 0700), started under umask 000 with a secret in its
    environment; users alice and bob (100 credits each)."""
    monkeypatch.setenv("SERVER_SECRET_TOKEN", SECRET)
    base = Path(tempfile.mkdtemp(prefix="merkat-hostile-"))
    base.chmod(0o755)
    data = base / "data"
    old = os.umask(0)
    try:
        store = open_store(f"sqlite:///{data / 'merkat.db'}")
        keys = {u: store.add_user(u, budget=100_000_000) for u in ("alice", "bob")}
        store.close()
        cfg = load_config(None, data_dir=data, port=free_port(), period=0.5, admission=0.25,
                          backend={"cgroup_prefix": f"merkat-ht-{uuid.uuid4().hex[:8]}"},
                          tenants={"max_file": 4096})
        svc = Service(cfg, on_period=lambda rec: None)
        svc.start_background()
    finally:
        os.umask(old)
    url = f"http://127.0.0.1:{svc.port}"
    try:
        yield {"svc": svc, "data": data, "cfg": cfg,
               **{u: Api(url, k) for u, k in keys.items()}}
    finally:
        svc.shutdown()
        shutil.rmtree(base, ignore_errors=True)


def wait(cond: Any, timeout: float = 30.0, why: Any = None) -> Any:
    """``cond()``'s first true value within ``timeout`` s; else fail, saying ``why()``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = cond()
        if v:
            return v
        time.sleep(0.2)
    raise AssertionError("timed out" + (f": {why()}" if why else ""))


def _pids_file(pids_dir: Path, name: str) -> str:
    try:
        return (pids_dir / name).read_text()
    except OSError:
        return ""


def bomb_reached_its_limit(pids_dir: Path) -> bool:
    """The group held nearly its limit of 40 at some point, or the limit refused a fork.

    Sampling ``pids.current`` alone can miss it: a bomb whose shells are short-lived (each
    forks a pipeline in the background and exits) and slowed by a loaded machine may sit below
    35 whenever it is read. ``pids.peak`` (where the kernel has it) and ``pids.events``'s
    ``max`` count (forks the limit refused, v1 and v2) record what happened between reads."""
    current = _pids_file(pids_dir, "pids.current").strip()
    peak = _pids_file(pids_dir, "pids.peak").strip()
    refused = dict(line.split() for line in _pids_file(pids_dir, "pids.events").splitlines()
                   if len(line.split()) == 2)
    return (int(current or 0) >= 35 or int(peak or 0) >= 35
            or int(refused.get("max", "0")) > 0)


def bomb_state(svc: Any, pids_dir: Path, vm: str) -> str:
    """What a failing fork-bomb wait shows: the group's counters, the VM's record, its log."""
    files = {f: _pids_file(pids_dir, f).strip() for f in ("pids.current", "pids.peak",
                                                          "pids.max", "pids.events")}
    log = svc.backend.log_path(vm)
    tail = Path(log).read_text(errors="replace")[-800:] if log and Path(log).exists() else None
    return (f"{files}; backend vms {svc.backend.vm_ids()}; failures {svc.backend.failures}; "
            f"log tail {tail!r}")


def test_a_hostile_command_runs_as_its_owner_and_reaches_nothing(world: dict[str, Any]) -> None:
    """The issue's must-show: `id -u; cat DATA_DIR/merkat.db; cat /etc/shadow; echo $$ >
    /sys/fs/cgroup/cpu/cgroup.procs; env` prints a non-zero uid, permission errors, no server
    secret, and its process stays in its cgroup; the audit and every balance are unchanged."""
    svc, data = world["svc"], world["data"]
    ledger = svc.store.ledger
    total = sum(ledger.balances().values())
    bob = ledger.balance("bob")
    template = f"""\
name: evil
controller: {{policy: best-effort}}
budget: 5
commands: {{start: 'echo plugin-uid=$(id -u); env'}}
clusters:
  - name: main
    command: >-
      id -u; cat {data}/merkat.db; cat /etc/shadow;
      echo $$ > /sys/fs/cgroup/cpu/cgroup.procs;
      "$MERKAT_PYTHON" -m merkat user add mallory --admin --data-dir {data};
      echo cgroup=$(grep ':cpu:' /proc/self/cgroup); env; echo END; exec sleep 60
    cpu: 1
    memory: 64
"""
    code, row = world["alice"].call("POST", "/platforms", template.encode())
    assert code == 201, row
    log = data / "logs" / "evil" / "vm1.log"
    text = wait(lambda: log.exists() and "END" in (t := log.read_text()) and t)
    lines = text.splitlines()
    alice = svc.manager.tenants.identity("alice")
    assert int(lines[0]) == alice.uid == svc.config.tenants.uid_base + svc.store.tenant_number("alice")
    assert alice.uid != 0
    assert f"cat: {data}/merkat.db: Permission denied" in text
    assert "cat: /etc/shadow: Permission denied" in text
    assert "/sys/fs/cgroup/cpu/cgroup.procs: Permission denied" in text
    assert SECRET not in text and "SERVER_SECRET_TOKEN" not in text
    prefix = svc.config.backend.cgroup_prefix
    assert "cgroup=" in text and f":cpu:/{prefix}/evil/vm1" in text  # it stayed
    env = dict(line.split("=", 1) for line in text.split("cgroup=", 1)[1].splitlines()[1:]
               if "=" in line and not line.startswith("END"))
    assert env["HOME"] == str(alice.home) and env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert env["MERKAT_VM"] == "evil/vm1" and env["MERKAT_USER"] == "alice"
    # the server sees the VM's session leader in its group, as her uid
    vm = svc.backend.vm("evil/vm1")
    assert vm is not None and vm.pid in svc.backend.tree.pids("evil/vm1")
    assert os.stat(f"/proc/{vm.pid}").st_uid == alice.uid
    # the start plugin ran as her too, with the same clean environment
    plugins = data / "logs" / "evil" / "plugins.log"
    ptext = wait(lambda: plugins.exists() and "MERKAT_STATE" in (t := plugins.read_text()) and t)
    assert f"plugin-uid={alice.uid}" in ptext and SECRET not in ptext
    # nothing changed in the bank or the users
    assert "mallory" not in {u.name for u in svc.store.users()}
    assert ledger.audit().ok
    assert sum(ledger.balances().values()) == total and ledger.balance("bob") == bob
    # and the data directory is private whatever the umask (the server started under 000)
    assert stat.S_IMODE(os.stat(data).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(data / "merkat.db").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(alice.home).st_mode) == 0o700
    assert os.stat(alice.home).st_uid == alice.uid
    assert stat.S_IMODE(os.stat(svc.config.work_root).st_mode) == 0o711


def test_files_in_only_from_the_users_own_uploads(world: dict[str, Any]) -> None:
    from merkat.service.files import prepare

    svc = world["svc"]
    alice, bob = world["alice"], world["bob"]
    for bad in ("/etc/shadow", f"{world['data']}/merkat.db", "../bob/files/x"):
        t = f"""\
name: grab
controller: {{policy: best-effort}}
budget: 1
clusters: [{{name: main, command: cat shadow, files_in: ['{bad}']}}]
"""
        code, body = alice.call("POST", "/platforms", t.encode())
        assert code == 422 and "clusters.0.files_in: " in body["detail"], body
    # uploads: hers only, safe names, size limit
    assert alice.call("PUT", "/files/in.txt", b"42\n", "application/octet-stream") == (
        201, {"name": "in.txt", "size": 3})
    assert alice.call("PUT", "/files/.hidden", b"x", "application/octet-stream")[0] == 422
    assert alice.call("PUT", "/files/a%2Fb", b"x", "application/octet-stream")[0] in (404, 422)
    big = b"x" * (svc.config.tenants.max_file + 1)
    assert alice.call("PUT", "/files/big", big, "application/octet-stream", 60)[0] == 413
    assert [f["name"] for f in alice.call("GET", "/files")[1]["items"]] == ["in.txt"]
    assert bob.call("GET", "/files")[1]["items"] == []
    ident = svc.manager.tenants.identity("alice")
    assert (ident.home / "files" / "in.txt").stat().st_uid == ident.uid
    # a link she plants to a file she cannot read is copied with her rights: refused
    os.symlink("/etc/shadow", ident.home / "files" / "shadow")
    with pytest.raises(OSError, match="Permission denied"):
        prepare(ident, "grab", "main", 0, ["shadow"])
    assert not (ident.home / "work" / "grab" / "main-0" / "shadow").exists()
    cwd = prepare(ident, "grab", "main", 1, ["in.txt"])
    assert (cwd / "in.txt").read_text() == "42\n" and cwd.stat().st_uid == ident.uid


def test_a_fork_bomb_stays_under_its_pids_limit_and_the_server_answers(
        world: dict[str, Any], cpu_heavy: int) -> None:
    svc, alice, bob = world["svc"], world["alice"], world["bob"]
    too_many = svc.config.tenants.max_pids + 1
    t = """\
name: bomb
controller: {policy: best-effort}
budget: 5
clusters:
  - {name: main, command: 'b() { b | b & }; b; sleep 60', cpu: 0.5, memory: 64, pids: PIDS}
"""
    code, body = alice.call("POST", "/platforms", t.replace("PIDS", str(too_many)).encode())
    assert code == 422 and "clusters.0.pids: " in body["detail"], body
    assert alice.call("POST", "/platforms", t.replace("PIDS", "40").encode())[0] == 201
    tree = svc.backend.tree
    wait(lambda: tree.exists("bomb/vm1") and tree.pids_max("bomb/vm1") == 40)
    dirs = tree.dirs("bomb/vm1")
    pids_dir = dirs.get("pids") or dirs["unified"]  # v1 pids controller, or v2
    wait(lambda: bomb_reached_its_limit(pids_dir), 60,
         lambda: bomb_state(svc, pids_dir, "bomb/vm1"))  # a loaded machine grows it slowly
    for _ in range(5):
        t0 = time.monotonic()
        code, _ = bob.call("GET", "/prices", timeout=5)
        assert code == 200 and time.monotonic() - t0 < 1.0
        assert int((pids_dir / "pids.current").read_text()) <= 40
        time.sleep(0.2)
    assert alice.call("POST", "/platforms/bomb/stop", b"", "application/json")[0] == 200
    wait(lambda: not tree.exists("bomb/vm1"), 20)


def test_a_server_that_is_not_root_says_its_users_run_as_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from merkat.service import tenants

    monkeypatch.setattr(tenants, "can_switch", lambda: False)
    cfg = load_config(None, data_dir=tmp_path / "d")
    store = open_store(cfg.database)
    store.add_user("alice")
    t = tenants.Tenants(cfg, store)
    assert t.warning is not None and "not root" in t.warning
    ident = t.identity("alice")
    assert (ident.uid, ident.home) == (os.geteuid(), tmp_path / "d-work" / "alice")
    store.close()


def test_a_removed_users_number_is_never_given_again(tmp_path: Path) -> None:
    """Row ids may be reused after a removal; host numbers never are (no new user gets a
    removed user's uid, her leftover files); a user added again under the same name gets a
    new uid and her old area becomes hers."""
    from merkat.service.tenants import Tenants

    cfg = load_config(None, data_dir=tmp_path / "d")
    store = open_store(cfg.database)
    t = Tenants(cfg, store)
    base = cfg.tenants.uid_base
    store.add_user("alice")
    store.add_user("bob")
    alice = t.identity("alice")
    assert (alice.uid, t.identity("bob").uid) == (base + 1, base + 2)
    (alice.home / "notes").write_text("mine")
    os.chown(alice.home / "notes", alice.uid, alice.gid)
    store.remove_user("bob")
    store.add_user("carol")  # may take bob's row id: not his uid
    assert t.identity("carol").uid == base + 3
    store.remove_user("alice")
    store.add_user("alice")  # the same name again: a new number, the old area hers
    again = t.identity("alice")
    assert again.uid == base + 4 and again.home == alice.home
    assert {os.stat(p).st_uid for p in (again.home, again.home / "notes")} == {again.uid}
    store.close()


def test_a_named_account_and_the_templates_own_environment(tmp_path: Path) -> None:
    import pwd

    from merkat.service.config import ConfigError
    from merkat.service.templates import TemplateError, parse
    from merkat.service.tenants import Tenants

    with pytest.raises(ConfigError, match=r"tenants.accounts: .*never run as root"):
        load_config(None, data_dir=tmp_path / "x", tenants={"accounts": {"eve": "root"}})
    cfg = load_config(None, data_dir=tmp_path / "d", tenants={"accounts": {"alice": "nobody"}})
    store = open_store(cfg.database)
    store.add_user("alice")
    ident = Tenants(cfg, store).identity("alice")
    assert ident.uid == pwd.getpwnam("nobody").pw_uid != 0
    store.close()
    base = "name: e\ncontroller: {policy: best-effort}\nbudget: 1\nclusters:\n  - name: m\n" \
           "    command: env\n    env: {%s}\n"
    for bad, why in (("MERKAT_VM: x", "set by the server"), ("HOME: /", "set by the server"),
                     ("'1A': x", "not a variable name")):
        with pytest.raises(TemplateError, match=f"clusters.0.env.*{why}"):
            parse(base % bad)
    env = parse(base % "GREETING: hi, PATH: /opt/bin").clusters[0].env
    b = LocalBackend([Node("n0", "0", 1.0, 512.0)], tmp_path / "logs",
                     prefix=f"merkat-env-{uuid.uuid4().hex[:8]}")
    b.register("a", lambda app, vm, i: Launch("/usr/bin/env; /usr/bin/id -u", index=i, identity=ident,
                                              user_env=env, cwd="/"))
    from merkat.core.backend import Plan, VMPlacement

    try:
        b.apply(Plan(time=0, period=1, create=(VMPlacement("a/vm1", "a", 0),)))
        log = tmp_path / "logs" / "a" / "vm1.log"
        text = wait(lambda: log.exists() and "\n" in (t := log.read_text()) and
                    t.strip().splitlines()[-1].isdigit() and t)
        assert "GREETING=hi" in text and "PATH=/opt/bin" in text and "MERKAT_VM=a/vm1" in text
        assert text.strip().splitlines()[-1] == str(ident.uid)
    finally:
        b.close()


def test_the_cli_uploads_files_and_submit_sends_the_templates_own(
        world: dict[str, Any], tmp_path: Path) -> None:
    import subprocess
    import sys

    svc = world["svc"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
           "MERKAT_URL": world["alice"].url, "MERKAT_TOKEN": world["alice"].key}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True,
                              text=True, env=env, timeout=60, cwd=tmp_path)

    (tmp_path / "notes.txt").write_text("hello\n")
    r = cli("file", "put", "notes.txt")
    assert (r.returncode, r.stdout) == (0, "file notes.txt uploaded (6 bytes)\n"), r.stderr
    r = cli("file", "put", "notes.txt", "--name", "../x")
    assert r.returncode == 2 and r.stderr.startswith("error: --name: '../x' is not a file name")
    listed = json.loads(cli("file", "list", "-o", "json").stdout)["items"]
    assert [(f["name"], f["size"]) for f in listed] == [("notes.txt", 6)]
    (tmp_path / "input.txt").write_text("21\n")
    (tmp_path / "calc.yaml").write_text("""\
name: calc
controller: {policy: best-effort}
budget: 2
clusters:
  - name: main
    command: echo $(( $(cat input.txt) * 2 )) > result.txt
    files_in: [input.txt]
    files_out: [result.txt]
    cpu: 0.5
    memory: 64
""")
    r = cli("submit", "calc.yaml")
    assert r.returncode == 0 and "uploaded input.txt (3 bytes)" in r.stderr, r.stderr
    ident = svc.manager.tenants.identity("alice")
    out = ident.home / "out" / "calc" / "main-0" / "result.txt"
    assert wait(lambda: out.exists() and out.read_text() == "42\n")
    assert out.stat().st_uid == ident.uid


def test_the_mount_plan_hides_closed_directories_but_the_paths_a_user_needs() -> None:
    from merkat.backends.local.sandbox import Identity, mount_plan, reachable

    base = Path(tempfile.mkdtemp(prefix="merkat-plan-"))
    base.chmod(0o755)  # (pytest's own directory is closed too)
    top = base / "closed"
    (top / "py" / "lib").mkdir(parents=True)
    (top / "secret").mkdir()
    (top / "inner").mkdir()
    (top / "inner" / "home").mkdir()
    top.chmod(0o700)
    (top / "inner").chmod(0o700)
    ident = Identity("alice", 200999, 200999, top / "inner" / "home")
    assert reachable(top / "py", ident.uid, ident.gid) == top
    assert reachable(Path("/usr/bin"), ident.uid, ident.gid) is None
    # one tmpfs on the topmost closed directory: the interpreter read-only, her area writable,
    # a path inside another bound one not bound twice, the rest (secret/) hidden
    plan = mount_plan(ident, [top / "py", top / "py" / "lib", Path("/usr")], [ident.home])
    assert plan == [(str(top), [(str(top / "py"), True), (str(ident.home), False)])]
    shutil.rmtree(base)
