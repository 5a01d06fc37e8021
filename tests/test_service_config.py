"""The server's configuration: defaults, YAML file, environment overrides, flags, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from merkat.service.config import ConfigError, load_config


def test_defaults_are_merkats(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("MERKAT_PERIOD", "MERKAT_ADMISSION", "MERKAT_PORT"):
        monkeypatch.delenv(k, raising=False)
    c = load_config()
    assert (c.host, c.port, c.period, c.admission) == ("127.0.0.1", 8080, 40.0, 10.0)
    assert c.backend.name == "local" and c.economy == "themis" and c.charging == "bid"
    assert c.database == f"sqlite:///{c.data_dir / 'merkat.db'}"


def test_file_then_environment_then_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                          ) -> None:
    f = tmp_path / "server.yaml"
    f.write_text("period: 20\nadmission: 5\nport: 9000\nreserve: {cpu: 0.5, memory: 0.01}\n"
                 "db_url: postgresql://u@h/db\nbackend: {split: 2}\n")
    monkeypatch.setenv("MERKAT_ADMISSION", "7")
    c = load_config(f, port=9100)
    assert (c.period, c.admission, c.port) == (20.0, 7.0, 9100)
    assert c.reserve == {"cpu": 0.5, "memory": 0.01} and c.backend.split == 2
    assert c.database == "postgresql://u@h/db"


@pytest.mark.parametrize(("text", "message"), [
    ("period: 0\n", "config: period: Input should be greater than 0"),
    ("reserve: {gpu: 1}\n", "config: reserve: unknown resource 'gpu'"),
    ("charging: rent\n", "config: charging: the live service charges by bid, use, not 'rent'"),
    ("economy: tycoon\n",
     "config: economy: the live service runs the economies themis, closed, not 'tycoon'"),
    ("redistribute_every: 0\n", "config: redistribute_every: Input should be greater than"),
    ("backend: {nodes: [{name: n0, cpus: 'zero', memory: 10}]}\n",
     "config: backend.nodes.0.cpus: String should match pattern"),
    ("period: .inf\n", "config: period: must be a number of seconds from 0.1 to 86400, got inf"),
    ("period: 1e300\n", "config: period: must be a number of seconds from 0.1 to 86400, got"),
    ("period: 1e-9\n", "config: period: must be a number of seconds from 0.1 to 86400, got"),
    ("admission: .inf\n", "config: admission: must be a number of seconds from 0.1 to 86400"),
    ("reserve: {cpu: .inf}\n", "config: reserve: cpu must be a finite number >= 0, got inf"),
    ("backend: {nodes: [{name: n0, cpus: '1-0', memory: 10}]}\n",
     "config: backend.nodes.0.cpus: 1-0: a range goes up (write 0-1)"),
    ("backend: {nodes: [{name: n0, cpus: '0', memory: .inf}]}\n",
     "config: backend.nodes.0.memory: inf MiB is more than this machine has"),
    ("tenants: {max_files_bytes: 0}\n",
     "config: tenants.max_files_bytes: Input should be greater than or equal to 1"),
    ("tenants: {max_files_bytes: lots}\n", "config: tenants.max_files_bytes: Input should be"),
    ("colour: red\n", "config: colour: Extra inputs are not permitted"),
    ("period: [\n", "line 2: not valid YAML"),
    ("- 1\n", "expected a mapping"),
])
def test_bad_values_name_the_field(tmp_path: Path, text: str, message: str) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(f)
    assert message in str(info.value), str(info.value)


def test_a_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")
