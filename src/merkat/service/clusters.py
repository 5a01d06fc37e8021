"""Every virtual cluster's monitor, aggregated for the controller (Merkat §4.2.1: "each virtual
cluster can have its own monitor ... the application controller ... aggregates"), and the
heartbeat (§4.2.3: "heartbeats are sent periodically ... to detect possible failures").

- Each cluster with a ``monitor:`` is read on its own VM (the cluster's first), by the
  monitor runner (:mod:`merkat.service.probes`), at most once a period: a log monitor every
  period, or every ``poll`` seconds when its cluster sets ``poll``; a command monitor every
  ``poll`` seconds, its cluster's else the template's. A cluster's ``poll: 0`` (Merkat's XML
  ``<group poll='no'>``) turns its monitor off; ``poll='yes'`` is the template's ``<poll>``.
  The platform's ``commands.monitor`` plugin is the monitored cluster's monitor when that
  cluster has none. Pushed metrics (``POST .../metrics``) update the monitored cluster's.
- :func:`aggregate` — what the controller sees (pure): the **sum of the work** (work done,
  work total and tasks left add up over the clusters) progressing at the pace of the
  **slowest cluster**: the aggregate rate is the total work left over the longest time any
  cluster needs to finish its own at its rate (``Σ left / max(left_i / rate_i)``), so the
  controller's estimate of the finish is the last cluster's; the same for ``ideal_rate``. A
  cluster with work left but no rate yet leaves the aggregate rate unknown (None). The
  ``performance`` / ``reference`` pair is the worst cluster's (the furthest from its
  reference in the metric's ``sense``); the task times are the longest.
- :func:`stalled`, the heartbeat — ``health.stall_s`` (template; default off): a cluster whose monitor
  reported no progress (its ``work_done``, or its ``tasks_left``, unchanged) for that long
  while its VM runs has that VM restarted like a failed one (killed; the backend's health check
  restarts it, up to ``backend.max_restarts``); an event ``vm-stalled`` says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from merkat.control.types import Metrics, Sense
from merkat.service.backends import Killing
from merkat.service.monitors import MetricsTracker

if TYPE_CHECKING:
    from merkat.service.context import ManagerState
    from merkat.service.templates import Monitor, Template


def aggregate(readings: Mapping[str, Metrics]) -> Metrics:
    """The clusters' readings as one (module doc). One reading is returned as it is; none
    gives empty metrics."""
    ms = [m for m in readings.values() if m is not None]
    if not ms:
        return Metrics()
    if len(ms) == 1:
        return ms[0]
    totals = [m.work_total for m in ms if m.work_total is not None]
    work_total = sum(totals) if totals else None
    work_done = sum(m.work_done for m in ms)
    # what is left, cluster by cluster (a cluster without a total: unknown, not counted)
    lefts = [(m.work_left, m.progress_rate, m.ideal_rate) for m in ms if m.work_total]
    left_total = sum(left for left, _, _ in lefts if left)

    def pace(k: int) -> float | None:
        rates = [m.progress_rate if k == 1 else m.ideal_rate for m in ms]
        if left_total <= 0:  # nothing left anywhere: the rates add up
            known = [r for r in rates if r is not None]
            return sum(known) if known else None
        longest = 0.0
        for left, rate, ideal in lefts:
            r = rate if k == 1 else ideal
            if not left:
                continue
            if not r:
                return None  # a cluster with work left and no pace: unknown
            longest = max(longest, left / r)
        return left_total / longest if longest > 0 else None

    tasks = [m.tasks_left for m in ms if m.tasks_left is not None]
    avg = [m.task_time_avg for m in ms if m.task_time_avg is not None]
    tmax = [m.task_time_max for m in ms if m.task_time_max is not None]
    perf = [m for m in ms if m.performance is not None]
    worst: Metrics | None = None
    if perf:
        def badness(m: Metrics) -> float:
            ratio = (m.performance or 0.0) / m.reference if m.reference else (m.performance or 0.0)
            return ratio if m.sense is Sense.LOWER_IS_BETTER else -ratio

        worst = max(perf, key=badness)
    return Metrics(
        performance=worst.performance if worst else None,
        reference=worst.reference if worst else None,
        sense=worst.sense if worst else Sense.LOWER_IS_BETTER,
        work_done=work_done, work_total=work_total,
        progress_rate=pace(1), ideal_rate=pace(2),
        tasks_left=sum(tasks) if tasks else None,
        task_time_avg=max(avg) if avg else None, task_time_max=max(tmax) if tmax else None)


def poll_of(t: Template, cluster: str) -> float:
    """The seconds between two readings of ``cluster``'s monitor (0: never read)."""
    c = next(c for c in t.clusters if c.name == cluster)
    return t.poll if c.poll is None else c.poll


def due(last: float, poll: float, now: float, period: float) -> bool:
    """Whether a monitor read at ``last`` every ``poll`` s is read at ``now``, when the next
    chance comes a ``period`` later: now, unless waiting for that chance is closer to the
    interval than reading now (a reading never waits more than half a period too long)."""
    if poll <= 0:
        return False
    return now - last >= poll - period / 2


def cluster_vm(m: ManagerState, name: str, t: Template, cluster: str) -> str | None:
    """The VM ``cluster``'s monitor reads: the cluster's first VM of platform ``name``."""
    app = m.platform.apps.get(name)
    if app is None:
        return None
    for vm in app.records():
        index = m.vm_index.get(vm.id)
        if index is not None:
            c, k = t.cluster_of(index)
            if c.name == cluster and k == 0:
                return vm.id
    return None


def monitor_of(t: Template) -> Monitor | None:
    """A template's monitor: its monitored cluster's, else its ``commands.monitor`` plugin."""
    from merkat.service.templates import Monitor

    mon: Monitor | None = t.monitored.monitor
    if mon is None and t.commands.monitor:
        mon = Monitor(kind="command", command=t.commands.monitor, ideal_rate=None)
    return mon


def monitors_of(t: Template) -> list[tuple[str, Monitor]]:
    """Each cluster's monitor, the monitored cluster's first (its ``commands.monitor`` plugin
    when it has none: :func:`monitor_of`)."""
    out: list[tuple[str, Monitor]] = []
    first = monitor_of(t)
    if first is not None:
        out.append((t.monitored.name, first))
    out += [(c.name, c.monitor) for c in t.clusters
            if c.monitor is not None and c.name != t.monitored.name]
    return out


def probe_key(name: str, t: Template, cluster: str) -> str:
    """The monitor runner's key of ``cluster``'s reading: the platform's name for its
    monitored cluster, ``NAME/CLUSTER`` for another."""
    return name if cluster == t.monitored.name else f"{name}/{cluster}"


def tracker_of(live: Any, cluster: str) -> MetricsTracker:
    """The tracker of ``cluster``'s readings (the monitored cluster's is ``live.tracker``,
    which pushed metrics update too)."""
    if cluster == live.template.monitored.name:
        return live.tracker  # type: ignore[no-any-return]
    found = live.others.get(cluster)
    if found is None:
        c = next(c for c in live.template.clusters if c.name == cluster)
        found = live.others[cluster] = MetricsTracker(c.monitor)
    return found  # type: ignore[no-any-return]


def platform_metrics(live: Any) -> Metrics:
    """What platform ``live``'s controller sees: its clusters' readings aggregated
    (:func:`aggregate`; the clusters whose monitor gave nothing yet are left out)."""
    readings = {live.template.monitored.name: live.tracker.metrics()}
    for cluster, tracker in live.others.items():
        if tracker.values:
            readings[cluster] = tracker.metrics()
    return aggregate(readings)


def stalled(live: Any, cluster: str, m: Metrics, at: float, running: bool) -> bool:
    """The heartbeat (module doc): note ``cluster``'s reading taken ``at``; True when it has
    shown no progress (``work_done``, ``tasks_left``, ``performance`` unchanged) for the
    template's ``health.stall_s`` seconds while its VM ran (the clock then starts again: one
    restart per stall). A VM not ``running`` (starting, suspended) restarts the clock."""
    stall = live.template.health.stall_s
    if not stall:
        return False
    if not running:
        live.beats.pop(cluster, None)
        return False
    work = (m.work_done, m.tasks_left, m.performance)
    seen = live.beats.get(cluster)
    if seen is None or seen[1] != work:
        live.beats[cluster] = (at, work)
        return False
    if at - seen[0] >= stall:
        live.beats[cluster] = (at, work)
        return True
    return False


def heartbeat(m: ManagerState, name: str, live: Any, cluster: str, reading: Metrics,
              at: float) -> None:
    """Feed ``cluster``'s reading to the heartbeat (:func:`stalled`); a stalled VM is killed,
    so that the backend's health check restarts it like a failed one (up to
    ``backend.max_restarts``; then the platform fails), with a ``vm-stalled`` event."""
    if not live.template.health.stall_s:
        return
    from merkat.control.types import VMState

    t = live.template
    vm = m.backend.monitored.get(name) if cluster == t.monitored.name else cluster_vm(
        m, name, t, cluster)
    app = m.platform.apps.get(name)
    running = app is not None and any(r.id == vm and r.state is VMState.RUNNING
                                      for r in app.records())
    if vm is None or not stalled(live, cluster, reading, at, running):
        return
    error = m.backend.kill(vm) if isinstance(m.backend, Killing) \
        else "this backend cannot restart a VM"
    what = "killed: it is restarted as a failed VM" if error is None else f"not restarted: {error}"
    m._event("vm-stalled", f"{vm}: no progress for {t.health.stall_s:g} s (cluster "
             f"{cluster}'s monitor): {what}", name)
