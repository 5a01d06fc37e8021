"""After the decision: the bills the economy could not charge (:func:`withhold`, on the
decision's values), then the decision and the backend's report into the records
(:func:`settle`), the one place a period's or an admission's outcome changes them.

Nothing was written before the backend acted, so nothing is undone: a VM whose start failed
is written unplaced (placed again next period), a VM whose migration failed is written on
the host it stayed on, and a failed destroy or suspend is returned to be re-issued.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace

from merkat.control.types import AppStatus, VMState
from merkat.core.backend import ApplyReport, VMPlacement
from merkat.core.bills import Usage
from merkat.core.draft import copy, draft, install_each, keep, move_back, starting, unplace
from merkat.core.lifecycle import vm_transition
from merkat.core.model import App, Charged, Decision, Ops
from merkat.market import NO_HOST


def withhold(decision: Decision, unpaid: Collection[str],
             records: Mapping[str, App] | None = None) -> Decision:
    """``decision`` without the VMs of the ``unpaid`` applications (ids): an application
    that had VMs running has them suspended; one whose VMs were only starting goes back to
    waiting (its start did not happen). Nothing runs for free. ``records``: the
    applications' records, for an unpaid one the decision left unchanged (absent from
    ``decision.apps``: its next state is its record, :func:`~merkat.core.draft.next_of`)."""
    if not unpaid:
        return decision
    plan = decision.plan
    gone: set[str] = set()
    suspend: list[str] = []
    starting = {p.vm for p in plan.create} | {p.vm for p in plan.resume}
    apps = dict(decision.apps)
    usage = decision.usage  # (read when the new one is: charging by use)
    for app_id in sorted(unpaid):
        nx = apps.get(app_id)
        if nx is None:  # (unchanged by the decision: its record)
            if records is None:
                raise KeyError(app_id)
            nx = draft(records[app_id])
        nx = apps[app_id] = copy(nx)
        gone.update(nx.ids)
        states, hosts = nx.states, nx.hosts
        was_running = [k for k, vm_id in enumerate(nx.ids) if vm_id not in starting
                       and states[k] is not VMState.SUSPENDED and hosts[k] != NO_HOST]
        if was_running:
            for k in was_running:
                states[k] = vm_transition(states[k], VMState.SUSPENDED)
                nx.allocs[k] = {}
                suspend.append(nx.ids[k])
            keep(nx, [k for k, s in enumerate(states) if s is VMState.SUSPENDED])
            nx.hosts = [NO_HOST] * len(nx.ids)
            nx.status = AppStatus.SUSPENDED
            nx.suspensions += 1
        else:
            resumed = [k for k, s in enumerate(states) if s is VMState.RESUMING]
            for k in resumed:  # back to suspended: the resume did not happen
                states[k] = VMState.SUSPENDED
                hosts[k] = NO_HOST
                nx.fresh[k] = True
            keep(nx, resumed)
            nx.status = AppStatus.SUSPENDED if resumed else AppStatus.WAITING
            if not resumed and nx.start_time == decision.time:
                nx.start_time = None
    new_plan = replace(
        plan,
        suspend=plan.suspend + tuple(suspend),
        create=tuple(p for p in plan.create if p.vm not in gone),
        resume=tuple(p for p in plan.resume if p.vm not in gone),
        migrate=tuple(m for m in plan.migrate if m[0] not in gone),
        allocations={v: a for v, a in plan.allocations.items() if v not in gone},
        column=None,  # (not these allocations' column any more)
    )
    return replace(
        decision, plan=new_plan, apps=apps,
        bills=tuple(b for b in decision.bills if b[0] not in unpaid),
        usage=Usage(lambda: tuple(u for u in usage if u[0] not in unpaid)),
    )


def settle(apps: Mapping[str, App], decision: Decision, report: ApplyReport,
           charged: Charged) -> tuple[list[str], Ops]:
    """Write ``decision`` (a period's or an admission's), the backend's ``report`` of its plan
    and the economy's ``charged`` into the records ``apps``; return the failed operations,
    one line each, and the destroys and suspends to re-issue. Only the applications in
    ``decision.apps`` are written (the others the decision left as they are: nothing of
    theirs to write but what the report and the charge say)."""
    nexts = decision.apps
    install_each(zip(map(apps.__getitem__, nexts), nexts.values(), strict=True))
    plan = decision.plan
    ops = report.ops  # (none: the simulator's every report; no comprehension made)
    failed = {(o.op, o.vm): o.reason for o in ops if not o.ok} if ops else {}
    failures = [f"{op} {vm_id}: {failed[op, vm_id]}" for op, vm_id in sorted(failed)
                ] if failed else []
    retry = Ops()
    if failed:
        retry.destroy.extend(v for v in plan.destroy if ("destroy", v) in failed)
        # a VM this plan destroys needs no suspend again: re-issued, it would fail for ever
        # ("unknown VM") and reach the next VM of that id, another platform's of its name
        gone = set(plan.destroy)
        retry.suspend.extend(v for v in plan.suspend if ("suspend", v) in failed
                             and v not in gone)
        moves = [m for m in plan.migrate if ("migrate", m[0]) in failed]
        if moves:
            where = {vm_id: app_id for app_id in decision.apps
                     for vm_id in apps[app_id].columns[0]}
            for vm_id, src, _ in moves:
                move_back(apps[where[vm_id]], vm_id, src)  # it did not move
    _started(apps, plan.create + plan.resume, failed)
    for app_id, amount in charged.paid.items():
        apps[app_id].spent += amount
    return failures, retry


def _started(apps: Mapping[str, App], starts: Sequence[VMPlacement],
             failed: Mapping[tuple[str, str], str]) -> None:
    """The VMs of ``starts`` (the plan's creates and resumes) the backend started are
    running (booting and resuming take time in the world); one whose start ``failed`` is
    written unplaced (placed again next period). Written into each application's VM
    columns (:func:`~merkat.core.draft.starting`); a state's transition is found once per
    state (the lifecycle table's answer is a function of it)."""
    by_app: dict[str, tuple[list[VMState], dict[str, int]]] = {}
    running = VMState.RUNNING
    resuming = VMState.RESUMING
    to: dict[VMState, VMState] = {}
    for p in starts:
        at = by_app.get(p.app)
        if at is None:
            at = by_app[p.app] = starting(apps[p.app])
        states, rows = at
        k = rows[p.vm]
        state = states[k]
        if failed and ("resume" if state is resuming else "create", p.vm) in failed:
            unplace(apps[p.app], k)  # not started: placed again next period
            continue
        new = to.get(state)
        if new is None:
            new = to[state] = vm_transition(state, running)
        states[k] = new
