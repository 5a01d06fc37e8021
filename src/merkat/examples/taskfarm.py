"""A task farm for the live platform's examples (Merkat §5.3.2, Themis' master-worker):
a master with a queue of CPU-bound tasks, and workers that take them, in a shared directory.

    python -m merkat.examples.taskfarm master --tasks 60 --cost 0.5 --queue DIR
    python -m merkat.examples.taskfarm worker --queue DIR
    python -m merkat.examples.taskfarm auto ...   # master on the VM of index 0, else worker

The master fills ``DIR/todo`` with ``--tasks`` tasks (each ``--cost`` seconds of CPU), puts back
the tasks of workers that died (a released VM), prints its queue every second —
``tasks_left 42 done 18 avg 0.61 max 0.93`` (the monitor's regex reads them) — and exits 0 when
every task is done; between two reports it works on a task itself, so a farm scaled down to
its first VM still progresses (a horizontal policy releases the newest VMs). A worker claims a task by renaming it into ``DIR/doing`` (atomic), burns
its CPU, records its wall time in ``DIR/done``, and exits when the master has finished.
Workers added later (horizontal scaling) just start taking tasks.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from merkat.examples.solver import burn


def master(queue: Path, tasks: int, cost: float) -> None:
    for d in ("todo", "doing", "done"):
        (queue / d).mkdir(parents=True, exist_ok=True)
    (queue / "finished").unlink(missing_ok=True)
    have = {p.name for d in ("todo", "doing", "done") for p in (queue / d).iterdir()}
    for i in range(tasks):
        name = f"task-{i:05d}"
        if not any(h.startswith(name) for h in have):
            (queue / "todo" / name).write_text(str(cost))
    while True:
        for p in (queue / "doing").iterdir():  # tasks of dead workers go back in the queue
            pid = int(p.name.rsplit(".", 1)[1])
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                p.rename(queue / "todo" / p.name.rsplit(".", 1)[0])
            except PermissionError:
                pass
        done = [float(p.read_text() or 0) for p in (queue / "done").iterdir()]
        left = tasks - len(done)
        avg = sum(done) / len(done) if done else cost
        print(f"tasks_left {left} done {len(done)} avg {avg:.3f} max {max(done, default=cost):.3f}",
              flush=True)
        if left <= 0:
            (queue / "finished").touch()
            return
        if not work_one(queue):
            time.sleep(1.0)


def worker(queue: Path) -> None:
    while not (queue / "finished").exists():
        if not work_one(queue):
            time.sleep(0.2)


def work_one(queue: Path) -> bool:
    """Take one task and do it; False when the queue is empty."""
    todo, doing, done = queue / "todo", queue / "doing", queue / "done"
    claimed = None
    for p in sorted(todo.iterdir()) if todo.is_dir() else []:
        target = doing / f"{p.name}.{os.getpid()}"
        try:
            p.rename(target)
        except OSError:
            continue  # another worker took it
        claimed = target
        break
    if claimed is None:
        return False
    start = time.monotonic()
    burn(float(claimed.read_text() or 0))
    (done / claimed.name.rsplit(".", 1)[0]).write_text(f"{time.monotonic() - start:.3f}")
    claimed.unlink()
    return True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("role", choices=("master", "worker", "auto"))
    ap.add_argument("--queue", type=Path, required=True)
    ap.add_argument("--tasks", type=int, default=60)
    ap.add_argument("--cost", type=float, default=0.5)
    a = ap.parse_args()
    if a.role == "auto":
        a.role = "master" if os.environ.get("MERKAT_INDEX", "0") == "0" else "worker"
    if a.role == "master":
        master(a.queue, a.tasks, a.cost)
    else:
        worker(a.queue)


if __name__ == "__main__":
    main()
