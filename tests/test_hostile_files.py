"""A tenant's uploads are bounded in all, not only one by one (tenants.max_files_bytes): with
1,000 files of 64 MiB each allowed, one user could fill the server's disk for everyone. She
deletes her own files (``merkat file delete``, ``DELETE /files/NAME``), never another's, and a
link she plants is removed, not followed. A real server; root (uploads are written as her)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.test_hostile_tenant import Api, free_port

from merkat.backends.local.cgroups import detect
from merkat.service.config import load_config
from merkat.service.db import open_store
from merkat.service.files import FileError, Upload
from merkat.service.server import Service

pytestmark = [
    pytest.mark.root,
    pytest.mark.skipif(os.geteuid() != 0 or detect(Path("/sys/fs/cgroup")) is None,
                       reason="needs root and cgroups"),
]

OCTETS = "application/octet-stream"


@pytest.fixture
def server() -> Iterator[dict[str, Any]]:
    """A server whose users may upload files of 4,000 bytes, 10,000 bytes in all; alice, bob."""
    base = Path(tempfile.mkdtemp(prefix="merkat-files-"))
    data = base / "data"
    store = open_store(f"sqlite:///{data / 'merkat.db'}")
    keys = {u: store.add_user(u, budget=1_000_000) for u in ("alice", "bob")}
    store.close()
    cfg = load_config(None, data_dir=data, port=free_port(), period=1.0, admission=0.5,
                      tenants={"max_file": 4000, "max_files_bytes": 10_000})
    svc = Service(cfg, on_period=lambda rec: None)
    svc.start_background()
    url = f"http://127.0.0.1:{svc.port}"
    try:
        yield {"svc": svc, **{u: Api(url, k) for u, k in keys.items()}}
    finally:
        svc.shutdown()
        shutil.rmtree(base, ignore_errors=True)


def names(api: Api) -> list[tuple[str, int]]:
    return [(f["name"], f["size"]) for f in api.call("GET", "/files")[1]["items"]]


def test_a_users_files_are_bounded_in_all_and_she_deletes_her_own(
        server: dict[str, Any]) -> None:
    alice, bob = server["alice"], server["bob"]
    assert alice.call("PUT", "/files/a", b"x" * 4000, OCTETS)[0] == 201
    assert alice.call("PUT", "/files/b", b"x" * 4000, OCTETS)[0] == 201
    # a third would make 12,000 bytes: refused, and nothing of it is left
    code, body = alice.call("PUT", "/files/c", b"x" * 4000, OCTETS)
    assert code == 413 and "tenants.max_files_bytes" in body["detail"], body
    assert names(alice) == [("a", 4000), ("b", 4000)]
    ident = server["svc"].manager.tenants.identity("alice")
    assert sorted(os.listdir(ident.home / "files")) == ["a", "b"]  # no upload left behind
    # replacing a file does not count the file it replaces
    assert alice.call("PUT", "/files/a", b"y" * 4000, OCTETS)[0] == 201
    # the limit is hers: bob uploads as much
    assert bob.call("PUT", "/files/a", b"z" * 4000, OCTETS)[0] == 201
    # she deletes one of hers; bob's file of the same name stays
    assert alice.call("DELETE", "/files/b")[0] == 204
    assert alice.call("PUT", "/files/c", b"x" * 4000, OCTETS)[0] == 201
    assert names(alice) == [("a", 4000), ("c", 4000)] and names(bob) == [("a", 4000)]
    code, body = alice.call("DELETE", "/files/b")
    assert code == 404 and "no file 'b'" in body["detail"], body
    assert alice.call("DELETE", "/files/.hidden")[0] == 422
    # a link she planted is removed, its target left alone
    os.symlink("/etc/hostname", ident.home / "files" / "host")
    assert alice.call("DELETE", "/files/host")[0] == 204
    assert not (ident.home / "files" / "host").is_symlink()
    assert Path("/etc/hostname").exists()


def test_an_upload_in_progress_counts_against_the_others(server: dict[str, Any]) -> None:
    """Two uploads at once: the second sees the first's bytes so far."""
    svc = server["svc"]
    server["alice"].call("GET", "/files")  # her work area exists
    ident = svc.manager.tenants.identity("alice")
    first = Upload(ident, "one", 8000, 10, 10_000)
    try:
        first.write(b"x" * 7000)
        second = Upload(ident, "two", 8000, 10, 10_000)
        try:
            second.write(b"x" * 3000)
            with pytest.raises(FileError, match="max_files_bytes"):
                second.write(b"x")
        finally:
            second.abort()
    finally:
        first.abort()
    assert os.listdir(ident.home / "files") == []


def test_the_cli_deletes_a_file(server: dict[str, Any], tmp_path: Path) -> None:
    alice = server["alice"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src"),
           "MERKAT_URL": alice.url, "MERKAT_TOKEN": alice.key}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "merkat", *args], capture_output=True,
                              text=True, env=env, timeout=60, cwd=tmp_path)

    (tmp_path / "notes.txt").write_text("hello\n")
    assert cli("file", "put", "notes.txt").returncode == 0
    r = cli("file", "delete", "notes.txt")
    assert (r.returncode, r.stdout) == (0, "file notes.txt deleted\n"), r.stderr
    assert names(alice) == []
    r = cli("file", "delete", "notes.txt")
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    assert r.stderr == "error: name: you have no file 'notes.txt' (merkat file list)\n"
    r = cli("file", "delete", "../x")
    assert r.returncode == 2 and r.stderr.startswith("error: NAME: '../x' is not a file name")
    (tmp_path / "big").write_bytes(b"x" * 4000)
    for name in ("b1", "b2"):
        assert cli("file", "put", "big", "--name", name).returncode == 0
    r = cli("file", "put", "big", "--name", "b3")
    assert r.returncode == 2 and "tenants.max_files_bytes" in r.stderr, r.stderr
