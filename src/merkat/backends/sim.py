"""The simulated backend: VM operations with the SLO paper's overheads, simulated applications.

VM operations (SLO paper §4.3; Themis §IV-B):

- **boot**: a new VM gives no progress for ``boot_s`` (30 s) after it is created;
- **resume**: the same for ``resume_s`` (30 s) after a resume;
- **migration**: lasts memory / (host bandwidth / concurrent operations on the busier of the
  two hosts this period), during which the VM runs at 90 % (10 % CPU overhead);
- **resource allocation**: an application's speed is its CPU fraction, degraded in proportion
  to its memory fraction when it has less memory than it needs.

Applications (their models in :mod:`merkat.backends.sim_models`, exported here):

- :class:`RigidApp` — an iterative application with one task per VM that progresses in
  lock-step: the slowest VM sets the pace, and it progresses only when all its VMs run. Work is
  counted in seconds at full size (its ideal run time). Those at a kept pace advance together
  (:mod:`merkat.backends.sim_pace`).
- :class:`TaskFarm` — a master-worker bag of tasks; each worker (VM) takes the next task and
  runs it at its speed.

Every operation is counted in :attr:`SimBackend.counts`. A VM's speed and the applications'
progress over an interval (:class:`~merkat.backends.sim_time.SimTime`, which the backend
inherits) are in :mod:`merkat.backends.sim_time`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from merkat.backends import sim_pace
from merkat.backends.sim_models import (
    _NO_VMS,
    _RIGID_METRICS,
    AppModel,
    RigidApp,
    TaskFarm,
    _new,
    _observed,
    _set,
)
from merkat.backends.sim_pace import advance_paced, join_quiet, least_cpu
from merkat.backends.sim_time import _VM, SimTime
from merkat.control.types import AppStatus, Metrics
from merkat.core.backend import ApplyReport, Listed, Plan
from merkat.core.model import App, Observed

_NO_OPS: Counter[int] = Counter()
"""The operations per host of a plan without migrations (never written): an apply makes
its own ``Counter`` only for the migrations' bandwidth shares (~4.6 K instructions a call)."""

CHANGED = True
"""Whether :meth:`SimBackend.apply` visits only the VMs a plan's ``Listed`` says it
changed (``changed``) when it is stated against the plan this backend carried out last
(``since``, by identity) and no VM was put or released since (issue 28, twenty-fifth
session: every other VM holds that plan's mapping, the same object, which the walk would
skip); False: the reference, every VM listed visited."""


@dataclass
class SimBackend(SimTime):
    """Simulated VMs and applications behind the :class:`~merkat.core.backend.Backend`
    seam. ``bandwidth`` is each host's network bandwidth in MiB/s (1 Gbit/s by default);
    ``trade_memory`` False means memory is reserved as requested (CPU-only markets)."""

    boot_s: float = 30.0
    resume_s: float = 30.0
    bandwidth: float = 125.0
    migration_overhead: float = 0.10
    trade_memory: bool = True
    apps: dict[str, AppModel] = field(default_factory=dict)
    vms: dict[str, _VM] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    # Applications that may still progress (keys of ``apps`` whose model was unfinished when
    # last seen), so that :meth:`advance` does not scan every application ever added. An
    # application without VMs, or a rigid one with fewer VMs than its tasks, leaves it once
    # advanced (advancing it again would change nothing) and comes back when a VM of it is
    # put or released, or (not rigid) when its ``metrics`` are read.
    # One at a kept pace (``_pace``) is not in it: the two are the applications that may
    # progress, and an application leaves ``_pace`` for ``_live`` when its pace is forgotten.
    _live: dict[str, None] = field(default_factory=dict, init=False, repr=False, compare=False)
    _seen: int = field(default=0, init=False, repr=False, compare=False)
    # ``vms`` grouped by application (each group in ``vms`` order), kept up to date by apply
    # and _release; rebuilt by advance when its size disagrees with ``vms``.
    _by_app: dict[str, dict[str, _VM]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _n_indexed: int = field(default=0, init=False, repr=False, compare=False)
    # A rigid application's pace while none of its VMs changes (:meth:`_advance_rigid`):
    # its slowest VM's speed, kept once every VM is ready and none migrates; an operation
    # or a new allocation mapping for one of its VMs forgets it (apply, _put, _release:
    # _unpace). These applications advance together (merkat.backends.sim_pace).
    _pace: dict[str, float] = field(default_factory=dict, init=False, repr=False, compare=False)
    # A rigid application's last report (:meth:`observe`), reused while it is the same.
    _observed: dict[str, Observed] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    # The allocations mapping last applied and the count of VMs put or released then
    # (``_changes``): a plan that gives the same mapping again with no VM put or released
    # since changes no allocation (a quiet period reuses the last plan's mapping).
    _applied: object = field(default=None, init=False, repr=False, compare=False)
    _changes: int = field(default=0, init=False, repr=False, compare=False)
    _stamp: int = field(default=-1, init=False, repr=False, compare=False)
    # Per application, a time no VM of it is still booting, resuming or migrating after: an
    # upper bound of its VMs' ``ready_at`` and ``migrating_until``, raised by _put and by a
    # migration, set by :meth:`_rigid_pace` when it saw them all; absent: unknown. Before it,
    # a CPU-only rigid application's pace is its least CPU allocation's (:meth:`_rigid_pace`).
    _quiet: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                     compare=False)
    # Per application, its VMs' least CPU allocation, from the last plan's column
    # (sim_pace.least_cpu), while none of its VMs is put, released or given another mapping
    # (_unpace and apply drop it); absent: :meth:`_rigid_pace` takes the ``min`` itself.
    _lows: dict[str, float] = field(default_factory=dict, init=False, repr=False,
                                    compare=False)

    def __post_init__(self) -> None:  # the private state
        self._live, self._seen, self._by_app, self._n_indexed = {}, 0, {}, 0
        self._quiet, self._lows = {}, {}
        self._pace, self._observed = {}, {}
        self._applied, self._changes, self._stamp = None, 0, -1

    def add_app(self, app_id: str, model: AppModel) -> None:
        consistent = self._seen == len(self.apps)
        self.apps[app_id] = model
        self._pace.pop(app_id, None)  # (a model given again under the same id)
        self._live[app_id] = None
        if consistent:  # else ``apps`` was changed directly: advance rescans it
            self._seen = len(self.apps)

    def forget(self, app_ids: Sequence[str]) -> None:
        """Drop ended applications' models (their VMs are gone: ``ValueError`` for one that
        still has a VM here); the operation counts stay."""
        for app_id in app_ids:
            if self._by_app.get(app_id) or (self._n_indexed != len(self.vms) and any(
                    vm.app == app_id for vm in self.vms.values())):
                raise ValueError(f"application {app_id!r} still has VMs: it cannot be forgotten")
        for app_id in app_ids:
            if self.apps.pop(app_id, None) is not None:  # (keeps _seen == len(apps) if it was)
                self._seen -= 1
            self._live.pop(app_id, None)
            self._by_app.pop(app_id, None)
            self._pace.pop(app_id, None)
            self._observed.pop(app_id, None)
            self._quiet.pop(app_id, None)
            self._lows.pop(app_id, None)

    # --- Backend ---------------------------------------------------------------------

    def metrics(self, app: str) -> Metrics:
        model = self.apps[app]
        if model.finish_time is None and app not in self._live and app not in self._pace:
            self._live[app] = None  # more work after finishing (e.g. TaskFarm.add_tasks)
        return model.metrics()

    def finished(self, app: str) -> bool:
        return self.apps[app].finish_time is not None

    def observe(self, apps: Sequence[App]) -> dict[str, Observed]:
        """``{app id: Observed}`` for ``apps`` (:class:`merkat.runtime.observe.Observes`): as
        ``metrics``, ``idle`` (running applications) and ``finished`` give them, a rigid
        application's in one step and its last report reused while its metrics record and
        its finish are the same (waiting, suspended)."""
        models, kept = self.apps, self._observed
        running = AppStatus.RUNNING
        out: dict[str, Observed] = {}
        for a in apps:
            app_id = a.spec.id
            model = models[app_id]
            if type(model) is not RigidApp:
                out[app_id] = Observed(
                    self.metrics(app_id),
                    self.idle(app_id) if a.status == running else frozenset(),
                    self.finished(app_id),
                )
                continue
            m = model._metrics  # (RigidApp.metrics, inlined)
            done, rate, total = model.work_done, model.last_rate, model.work_total
            finished = model.finish_time is not None
            if m is None or m.work_done is not done or m.progress_rate is not rate \
                    or m.work_total is not total:
                # (it progressed: _rigid_metrics and _observed, inlined; its last report
                # cannot be reused)
                m = model._metrics = _new(Metrics)
                _set(m, "__dict__", dict(_RIGID_METRICS, work_done=done, work_total=total,
                                         progress_rate=rate))
                seen = kept[app_id] = _new(Observed)
                _set(seen, "__dict__", {"metrics": m, "idle": _NO_VMS, "finished": finished})
            else:
                was = kept.get(app_id)
                if was is None or was.metrics is not m or was.finished is not finished:
                    was = kept[app_id] = _observed(m, finished)
                seen = was
            # (a rigid application out of ``live`` and ``pace`` is at a fixed point until
            # one of its VMs is put or released, which puts it back: reading it changes
            # nothing, unlike ``metrics``, which puts back whatever is unfinished)
            out[app_id] = seen
        return out

    def idle(self, app: str) -> frozenset[str]:
        """A task farm's workers without a task, a self-advancing model's VMs outside its
        ``busy_vms()``; rigid applications have none."""
        model = self.apps[app]
        if not isinstance(model, TaskFarm):
            busy = getattr(model, "busy_vms", None)
            if busy is None:
                return frozenset()
            working = busy()
            return frozenset(v for v, vm in self.vms.items() if vm.app == app
                             and v not in working)
        if self._n_indexed == len(self.vms):  # the per-application grouping is current
            mine = self._by_app.get(app, {})
            return frozenset(v for v in mine if v not in model.running)
        return frozenset(v for v, vm in self.vms.items() if vm.app == app
                         and v not in model.running)

    def apply(self, plan: Plan) -> ApplyReport:
        """Carry out ``plan``; every operation succeeds in the simulator (the report lists no
        operation: a backend that reports nothing for one has done it)."""
        t = plan.time
        for vm_id in plan.destroy:
            self._release(vm_id)
            self.counts["destroy"] += 1
        for vm_id in plan.suspend:
            self._release(vm_id)
            self.counts["suspend"] += 1
        migrate = plan.migrate
        ops_per_host = Counter() if migrate else _NO_OPS  # (read by the migrations alone)
        if migrate:
            for _, src, dst in migrate:
                ops_per_host[src] += 1
                ops_per_host[dst] += 1
            for p in plan.resume:
                ops_per_host[p.host] += 1
        for p in plan.create:
            self._put(p.vm, _VM(p.app, p.host, {}, t + self.boot_s))
            self.counts["boot"] += 1
        for p in plan.resume:
            self._put(p.vm, _VM(p.app, p.host, {}, t + self.resume_s))
            self.counts["resume"] += 1
        pace, live = self._pace, self._live
        for vm_id, src, dst in migrate:
            vm = self.vms[vm_id]
            mem = self.apps[vm.app].memory
            share = self.bandwidth / max(ops_per_host[src], ops_per_host[dst], 1)
            vm.migrating_until = until = t + (mem / share if share > 0 else 0.0)
            self._busy_until(vm.app, until)
            vm.host = dst
            if pace.pop(vm.app, None) is not None:  # (_unpace, inlined)
                live[vm.app] = None
            self.counts["migration"] += 1
        allocations = plan.allocations
        if allocations is self._applied and self._changes == self._stamp:
            return ApplyReport(t)  # every VM holds its mapping already
        vms, lows = self.vms, self._lows
        last = None  # (an application's VMs come together in a period's plan: one pop)
        pairs: Iterable[tuple[str, Mapping[str, float]]]
        if type(allocations) is Listed:
            at, applied = allocations.changed, self._applied
            pairs = zip(allocations.ids, allocations.allocs, strict=True)  # (no dict)
            if (CHANGED and at is not None and self._changes == self._stamp
                    and type(applied) is Listed and allocations.since is applied.allocs):
                # every VM holds the last plan's mapping, the same object at every position
                # but these: visit only these (the walk below, by position)
                ids, maps = allocations.ids, allocations.allocs
                for m in at:
                    vm = vms[ids[m]]
                    if vm.alloc is not (alloc := maps[m]):
                        vm.alloc = alloc
                        if (app := vm.app) is not last:
                            last = app
                            lows.pop(app, None)
                            if pace.pop(app, None) is not None:
                                live[app] = None
                pairs = ()  # (all visited)
        else:
            pairs = allocations.items()
        for vm_id, alloc in pairs:
            vm = vms[vm_id]
            if vm.alloc is not alloc:  # a mapping is kept while its values do not change
                vm.alloc = alloc
                app = vm.app
                if app is not last:
                    last = app
                    lows.pop(app, None)
                    if pace.pop(app, None) is not None:
                        live[app] = None
        self._applied, self._stamp = allocations, self._changes
        if plan.column is not None and sim_pace.LOWS and self._n_indexed == len(vms):
            least_cpu(plan.column, len(allocations), self._by_app, lows)  # (all applied)
        return ApplyReport(t)

    def _unpace(self, app_id: str) -> None:
        """Forget ``app_id``'s kept pace (and least CPU allocation): it advances on its own
        again."""
        self._lows.pop(app_id, None)
        if self._pace.pop(app_id, None) is not None:
            self._live[app_id] = None

    def _unpace_all(self) -> None:
        """Forget every kept pace (and least CPU allocation)."""
        self._lows.clear()
        self._live.update(dict.fromkeys(self._pace))
        self._pace.clear()

    def _busy_until(self, app_id: str, t: float) -> None:
        """A VM of ``app_id`` boots, resumes or migrates until ``t``: ``_quiet`` no earlier
        (a NaN makes it unknown for good: never <= a time)."""
        quiet = self._quiet
        if not t <= quiet.get(app_id, -math.inf):
            quiet[app_id] = t

    def _put(self, vm_id: str, vm: _VM) -> None:
        self._changes += 1
        self._busy_until(vm.app, vm.ready_at)
        self._busy_until(vm.app, vm.migrating_until)
        self._unpace(vm.app)
        old = self.vms.get(vm_id)
        if old is not None:
            self._unpace(old.app)
        replaced = old is not None
        self.vms[vm_id] = vm
        self._live[vm.app] = None  # it may progress again
        if replaced:  # keeps its place in ``vms``: let advance regroup
            self._n_indexed = -1
        else:
            self._by_app.setdefault(vm.app, {})[vm_id] = vm
            self._n_indexed += 1

    def _release(self, vm_id: str) -> None:
        vm = self.vms.pop(vm_id, None)
        if vm is None:
            return
        self._changes += 1
        self._unpace(vm.app)
        self._live[vm.app] = None  # (one with fewer VMs than its tasks left it: see advance)
        group = self._by_app.get(vm.app)
        if group is not None and group.pop(vm_id, None) is not None:
            self._n_indexed -= 1
        model = self.apps[vm.app]
        if isinstance(model, TaskFarm):
            if vm_id in model.running:
                _, total = model.running.pop(vm_id)
                model.queue.appendleft(total)  # an interrupted task restarts elsewhere
        elif not isinstance(model, RigidApp):
            interrupt = getattr(model, "interrupt", None)
            if interrupt is not None:
                interrupt(vm_id)

    # --- time ------------------------------------------------------------------------

    def advance(self, t0: float, t1: float) -> None:
        """Let the applications progress from ``t0`` to ``t1`` with their allocations."""
        apps, live = self.apps, self._live
        if self._n_indexed != len(self.vms):
            self._by_app = {}
            for vm_id, vm in self.vms.items():
                self._by_app.setdefault(vm.app, {})[vm_id] = vm
            self._n_indexed = len(self.vms)
            live.update(dict.fromkeys(self._by_app))
            self._unpace_all()  # ``vms`` was changed directly: nothing kept is known valid
            self._quiet.clear()
            self._changes += 1
        by_app = self._by_app
        if len(apps) != self._seen:  # ``apps`` changed directly, not by add_app: rescan it
            self._unpace_all()
            live.update(dict.fromkeys(a for a, m in apps.items() if m.finish_time is None))
            self._seen = len(apps)
        # Each application progresses on its own: the order they are visited in is irrelevant.
        # Those at a kept pace (rigid, nothing changed since it was kept) go together; one
        # that finishes leaves them.
        pace = self._pace
        if sim_pace.FOLD and live and type(self)._speed is SimTime._speed:
            join_quiet(live, apps, by_app, self._quiet, self._lows, self.trade_memory, t0,
                       pace)  # (the quiet ones join the pass: no call each)
        if pace:
            ids = list(pace)
            rigid: list[RigidApp] = [apps[a] for a in ids]  # type: ignore[misc]  # (kept for these)
            for k in advance_paced(rigid, list(pace.values()), t0, t1):
                del pace[ids[k]]
        done = []
        for app_id in live:
            model = apps.get(app_id)
            if model is None or model.finish_time is not None:
                done.append(app_id)
                continue
            group = by_app.get(app_id)
            if isinstance(model, RigidApp):
                mine = list(group.values()) if group else []
                self._advance_rigid(model, mine, t0, t1)
                # its pace kept from now on: it joins them; fewer VMs than its tasks (none
                # included): a fixed point (no progress whatever their allocations, hosts
                # or operations) until one is put or released (_put, _release)
                if app_id in pace or len(mine) < model.vms:
                    done.append(app_id)
                continue
            vms = list(group.items()) if group else []
            if isinstance(model, TaskFarm):
                self._advance_farm(model, vms, t0, t1)
            else:
                own = getattr(model, "advance", None)
                if own is None:
                    raise TypeError(f"{app_id}: no progress model for {type(model).__name__}")
                own(self, sorted(vms), t0, t1)
            if not vms:  # no VM (waiting, suspended, stopped): a fixed point until it has one
                done.append(app_id)
        for app_id in done:
            del live[app_id]


__all__ = ["AppModel", "RigidApp", "SimBackend", "TaskFarm"]
