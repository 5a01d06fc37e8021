"""Traces by name: the bundled HPC2N trace, ``$MERKAT_TRACES``, the user cache,
``merkat traces list|fetch`` (against a local HTTP server) and a clone of the repository alone."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from typer.testing import CliRunner

import merkat
from merkat.cli import app
from merkat.workload import traces as tr
from merkat.workload.lublin import write as write_lublin

runner = CliRunner()
REPO = Path(merkat.__file__).resolve().parents[2]


def run(*args: str) -> tuple[int, str, str]:
    r = runner.invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


@pytest.fixture(autouse=True)
def _isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private user cache, no MERKAT_TRACES, no archive mirror."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    monkeypatch.delenv("MERKAT_TRACES", raising=False)
    monkeypatch.delenv("MERKAT_ARCHIVE_URL", raising=False)


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # no access log on stderr
        pass


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTP server on 127.0.0.1 serving ``tmp_path/www``; yields (base URL, folder)."""
    www = tmp_path / "www"
    www.mkdir()
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(www)))
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", www
    finally:
        server.shutdown()
        server.server_close()


def _small_gz(path: Path, jobs: int = 60) -> str:
    """Write a gzipped Lublin SWF of ``jobs`` jobs at ``path``; return the SHA-256 of its text."""
    plain = path.with_suffix("")
    write_lublin(plain, jobs, seed=3, nodes=32)
    text = plain.read_bytes()
    path.write_bytes(gzip.compress(text))
    plain.unlink()
    return hashlib.sha256(text).hexdigest()


def test_the_bundled_trace_is_found_by_name_file_name_and_path() -> None:
    p = tr.find_trace("HPC2N-2002-2.2-cln")
    assert p == tr.bundled_dir() / "HPC2N-2002-2.2-cln.swf.gz" and p.is_file()
    assert tr.find_trace(tr.HPC2N) == p
    assert tr.find_trace(str(p)) == p
    ack = (tr.bundled_dir() / "README.md").read_text()
    assert "Parallel Workloads Archive" in ack and "Ake Sandgren" in ack


def test_merkat_traces_is_an_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "own"
    own.mkdir()
    write_lublin(own / "HPC2N-2002-2.2-cln.swf", 40, seed=1, nodes=16)
    monkeypatch.setenv("MERKAT_TRACES", str(own))
    assert tr.find_trace("HPC2N-2002-2.2-cln") == own / "HPC2N-2002-2.2-cln.swf"
    code, out, _ = run("traces", "list", "-o", "json")
    assert code == 0
    first = json.loads(out)["items"][0]
    sha = hashlib.sha256((own / "HPC2N-2002-2.2-cln.swf").read_bytes()).hexdigest()
    assert first == {
        "name": "HPC2N-2002-2.2-cln",
        "jobs": 40,
        "span_s": first["span_s"],
        "sha256": sha,
        "path": str(own / "HPC2N-2002-2.2-cln.swf"),
        "source": "MERKAT_TRACES",
    }
    assert first["span_s"] > 0


def test_traces_list_shows_the_bundled_trace_with_its_jobs() -> None:
    code, out, _ = run("traces", "list", "-o", "json", "--archive")
    assert code == 0
    items = {i["name"]: i for i in json.loads(out)["items"]}
    assert items["HPC2N-2002-2.2-cln"]["jobs"] == 202_871
    assert items["HPC2N-2002-2.2-cln"]["source"] == "bundled"
    assert set(tr.ARCHIVE) <= set(items)  # --archive: the fetchable ones too
    code, out, _ = run("traces", "list")
    assert code == 0 and "HPC2N-2002-2.2-cln" in out


def test_an_unknown_trace_is_one_line_exit_2(tmp_path: Path) -> None:
    code, _, err = run("sim", "run", "--trace", "NOPE-1", "--scheduler", "easy",
                       "--out", str(tmp_path / "o"))  # fmt: skip
    assert code == 2
    assert len(err.strip().splitlines()) == 1
    assert err.startswith("error: --trace: trace 'NOPE-1' not found")
    assert "merkat traces list" in err
    code, _, err = run("sim", "run", "--trace", "NASA-iPSC-1993-3.1-cln.swf", "--scheduler",
                       "easy", "--out", str(tmp_path / "o"))  # fmt: skip
    # either found (in shared/traces beside a checkout) or the hint to fetch it
    assert code == 0 or "merkat traces fetch NASA-iPSC-1993-3.1-cln" in err


def test_fetch_downloads_checks_and_caches(served: tuple[str, Path], tmp_path: Path) -> None:
    base, www = served
    sha = _small_gz(www / "tiny.swf.gz")
    url = f"{base}/tiny.swf.gz"
    code, out, err = run("traces", "fetch", "tiny", "--url", url, "--sha256", sha, "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    cached = tmp_path / "xdg-cache" / "merkat" / "traces" / "tiny.swf.gz"
    assert doc == {"name": "tiny", "path": str(cached), "status": "downloaded, checksum ok"}
    assert cached.read_bytes() == (www / "tiny.swf.gz").read_bytes()
    code, out, _ = run("traces", "list", "-o", "json")
    items = {i["name"]: i for i in json.loads(out)["items"]}
    assert items["tiny"] == {"name": "tiny", "jobs": 60, "span_s": items["tiny"]["span_s"],
                             "sha256": sha, "path": str(cached), "source": "cache"}
    # usable by name at once
    code, out, err = run("sim", "run", "--trace", "tiny", "--scheduler", "easy",
                         "--out", str(tmp_path / "run"), "-o", "json")  # fmt: skip
    assert code == 0, err and json.loads(out)["jobs"] == 60
    # a second fetch downloads nothing; the SHA-256 of the .gz file is accepted too
    file_sha = hashlib.sha256((www / "tiny.swf.gz").read_bytes()).hexdigest()
    code, out, _ = run("traces", "fetch", "tiny", "--url", url, "--sha256", file_sha, "-o", "json")
    assert code == 0 and json.loads(out)["status"] == "already in the cache"
    code, out, _ = run("traces", "fetch", "tiny", "--url", url, "--sha256", file_sha, "--force")
    assert code == 0 and out.strip() == str(cached)


def test_a_checksum_mismatch_leaves_nothing(served: tuple[str, Path], tmp_path: Path) -> None:
    base, www = served
    _small_gz(www / "tiny.swf.gz")
    code, _, err = run("traces", "fetch", "tiny", "--url", f"{base}/tiny.swf.gz",
                       "--sha256", "0" * 64)  # fmt: skip
    assert code == 1 and len(err.strip().splitlines()) == 1
    assert "checksum mismatch" in err and "nothing was written" in err
    folder = tmp_path / "xdg-cache" / "merkat" / "traces"
    assert list(folder.iterdir()) == []  # no trace, no partial file


def test_fetch_an_archive_trace_by_name_from_a_mirror(
    served: tuple[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, www = served
    (www / "l_tiny").mkdir()
    sha = _small_gz(www / "l_tiny" / "TINY-2000-1-cln.swf.gz", jobs=25)
    entry = tr.ArchiveTrace("TINY-2000-1-cln", "l_tiny/TINY-2000-1-cln.swf.gz", sha, 25, "test")
    monkeypatch.setitem(tr.ARCHIVE, entry.name, entry)
    monkeypatch.setenv("MERKAT_ARCHIVE_URL", base + "/")
    code, out, err = run("traces", "fetch", "TINY-2000-1-cln")
    assert code == 0, err
    assert Path(out.strip()) == tr.find_trace("TINY-2000-1-cln")
    assert tr.count_jobs(Path(out.strip())) == 25


def test_fetch_offline_says_where_to_put_the_file(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code, _, err = run("traces", "fetch", "x", "--url", f"http://127.0.0.1:{port}/x.swf.gz",
                       "--sha256", "a" * 64)  # fmt: skip
    assert code == 1 and len(err.strip().splitlines()) == 1
    dest = tmp_path / "xdg-cache" / "merkat" / "traces" / "x.swf.gz"
    assert err.startswith("error: cannot download x from http://127.0.0.1:")
    assert f"put it at {dest}" in err


def test_fetch_refuses_bad_arguments() -> None:
    code, _, err = run("traces", "fetch", "SOMETHING-1999")
    assert code == 2 and "NAME: 'SOMETHING-1999' is not a trace merkat knows" in err
    code, _, err = run("traces", "fetch", "x", "--url", "http://127.0.0.1:1/x")
    assert code == 2 and err.startswith("error: --sha256: required with --url")
    code, _, err = run("traces", "fetch", "x", "--url", "ftp://h/x", "--sha256", "a" * 64)
    assert code == 2 and err.startswith("error: --url:")
    code, out, _ = run("traces", "fetch", "HPC2N-2002-2.2-cln")
    assert code == 0 and out.strip() == str(tr.bundled_dir() / "HPC2N-2002-2.2-cln.swf.gz")


def _copy_repository(dest: Path) -> None:
    """The repository's files alone (tracked and untracked-but-not-ignored), no ../shared."""
    try:
        names = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO, capture_output=True, check=True,
        ).stdout.decode().split("\0")  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(
            REPO, dest, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.so")
        )
        return
    for name in filter(None, names):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)


@pytest.mark.slow
def test_a_clone_alone_runs_the_readme_trace_commands(tmp_path: Path) -> None:
    clone = tmp_path / "alone" / "merkat"
    _copy_repository(clone)
    assert not (clone.parent / "shared").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("MERKAT_TRACES", "PYTHONPATH")}
    env.update(PYTHONPATH=str(clone / "src"), XDG_CACHE_HOME=str(tmp_path / "cache"))

    def merkat(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "merkat", *args],
            cwd=clone, env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip

    r = merkat("traces", "list", "-o", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["items"] == [
        {
            "name": "HPC2N-2002-2.2-cln",
            "jobs": 202_871,
            "span_s": 109_241_501,
            "sha256": tr.ARCHIVE["HPC2N-2002-2.2-cln"].sha256,
            "path": str(clone / "src/merkat/data/traces/HPC2N-2002-2.2-cln.swf.gz"),
            "source": "bundled",
        }
    ]
    r = merkat("sim", "experiment", "themis-fig5", "--jobs", "50", "--factors", "1.0",
               "--out", "out")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads((clone / "out" / "results.json").read_text())
    assert doc["parameters"]["jobs"] == 50
    r = merkat("sim", "run", "--trace", "HPC2N-2002-2.2-cln", "--jobs", "300",
               "--scheduler", "easy", "--out", "runs/easy", "-o", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["jobs"] == 300
