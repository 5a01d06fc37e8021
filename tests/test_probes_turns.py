"""An owner with more platforms than her quota of readings in flight has each of them read in
turn (found with issue 26's deadline scenario: four platforms of one owner, the last one's
monitor was never read, so its controller never saw its progress)."""

from __future__ import annotations

from pathlib import Path

from merkat.service.probes import MonitorRunner, Probe
from merkat.service.templates import Monitor


def test_each_platform_of_an_owner_is_read_in_turn(tmp_path: Path) -> None:
    log = tmp_path / "vm.log"
    log.write_text("iteration 3/9\n")
    mon = Monitor(kind="log", regex=r"iteration (?P<work_done>\d+)/(?P<work_total>\d+)")
    runner = MonitorRunner(backend=object(), per_owner=2)
    probes = [Probe(f"p{k}", "alice", mon, f"p{k}/vm1", str(log)) for k in range(4)]
    read: list[set[str]] = []
    try:
        for _ in range(2):
            runner.wait(runner.start(probes), 5.0)
            read.append(set(runner.take()))
    finally:
        runner.close()
    assert all(len(r) == 2 for r in read)
    assert read[0] | read[1] == {"p0", "p1", "p2", "p3"}  # nobody waits two periods
