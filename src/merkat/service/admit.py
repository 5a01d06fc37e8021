"""Admission of a queued platform into the driver (Merkat §4.2.2), the live service's side.

:func:`admit_row` turns a platform's template into an application and hands it to the runtime
driver exactly as the simulator hands it a trace's job (:meth:`Driver.submit
<merkat.runtime.driver.Driver.submit>`): the platform records it with its controller (a
policy by name, or a ``merkat.controllers`` entry point: :func:`make_controller`), the
backend is given its **launcher** (how each VM starts: its cluster's command, its owner's
identity, the environment of §4.2.2: :func:`launcher`), and the economy opens its account
``app:NAME`` (``app:NAME@G`` for a name used again) and funds it with the template's budget
from what its owner holds (``Economy(owner_funds=True)``: ``budget of NAME``, idempotency key
``budget:NAME``). A platform admitted again after a restart (``resumed``) keeps its account,
its money and its deadline (counted from its submission); its past payments are read back
from the books.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from merkat.control.base import Controller
from merkat.control.registry import ParamError, PolicyError, make_policy
from merkat.core.model import AppSpec
from merkat.runtime.arrivals import Arrival
from merkat.service import files
from merkat.service.backends import Namespaced
from merkat.service.context import Live, ManagerState
from merkat.service.db import PlatformRow
from merkat.service.monitors import MetricsTracker
from merkat.service.templates import Template, TemplateError

if TYPE_CHECKING:
    from merkat.backends.local import Launch

CONTROLLERS = "merkat.controllers"
"""Entry-point group of custom controllers: ``name = "pkg.module:ControllerClass"``."""


def make_controller(policy: str, params: dict[str, Any]) -> Controller:
    """A controller by registry name, else by a ``merkat.controllers`` entry point."""
    from merkat.control.steer import live_params

    try:  # live, the deadline policies steer by the share they need (merkat.control.steer)
        return make_policy(policy, **live_params(policy, params))
    except ParamError as exc:  # (templates.validate refused it already: a stored template)
        raise TemplateError(f"controller.params.{exc}") from None
    except PolicyError as exc:
        if not str(exc).startswith("unknown policy"):
            raise TemplateError(f"controller.params: {exc}") from None
        from importlib.metadata import entry_points

        for ep in entry_points(group=CONTROLLERS):
            if ep.name == policy:
                cls = ep.load()
                try:
                    ctl: Controller = cls(**params)
                except (TypeError, ValueError) as e:
                    raise TemplateError(f"controller.params: {e}") from None
                return ctl
        raise TemplateError(f"controller.policy: {exc}") from None


def register_launcher(backend: Any, arrival: Arrival) -> None:
    """How an admitted platform enters a live backend (the driver's ``admit``): its launcher
    (the arrival's ``model``) is registered under its name."""
    assert arrival.spec is not None
    backend.register(arrival.spec.id, arrival.model)


def spec_of(t: Template, owner: str, start: float, budget: float) -> AppSpec:
    """The application of template ``t`` submitted at ``start`` (its deadline counts from
    there), funded with ``budget`` credits at admission."""
    c = t.controlled
    return AppSpec(
        id=t.name, policy=t.controller.policy, size=t.size,
        vm_size={"cpu": c.cpu, "memory": c.memory}, submit_time=start, budget=budget,
        renewal=t.renewal, budget_cap=t.budget if t.renewal > 0 else None,
        deadline=start + t.controller.reference if t.controller.reference else None,
        vm_min={"cpu": c.min_cpu, "memory": c.min_memory}, owner=owner, trade=tuple(t.trade))


def admit_row(m: ManagerState, row: PlatformRow, t: Template, resumed: bool = False) -> None:
    """Admit ``row`` (its template ``t``, checked against its owner's balance by the caller:
    :func:`merkat.service.tenancy.check_admission`) into the driver (module doc;
    ``resumed``: again, after a restart). Raises ``TemplateError``, ``ValueError`` or a
    bank error (the caller forgets what was half-done: :func:`merkat.service.tenancy.forget`)."""
    from merkat.service.idle import with_keep_idle
    from merkat.service.records import new_account

    ctl = with_keep_idle(t, make_controller)  # the template's keep_idle (idle.py)
    spec = spec_of(t, row.owner, row.submitted if resumed else m.clock(),
                   0.0 if resumed else t.budget)  # (a resumed one's money is in its account)
    if isinstance(m.backend, Namespaced):  # each user's VMs apart (kubernetes namespaces)
        m.backend.owner_of[t.name] = row.owner
    # its own account: a name used again after a delete gets app:NAME@2 (records.py)
    account = (row.account or f"app:{t.name}") if resumed else new_account(
        m.store.ledger, t.name)
    app = m.driver.submit(spec, launcher(m, t, row.owner), ctl, account=account)
    if resumed:  # what it paid before the restart is in the books, not in memory
        from merkat.service.recovery import paid_before

        app.spent = m.paid[t.name] = paid_before(m.store.ledger, app.account,
                                                 m.config.provider)
    m.live[t.name] = Live(t, row.owner, MetricsTracker(t.monitored.monitor))
    m.store.set_platform(t.name, state="waiting", deadline=spec.deadline, account=account)
    if not resumed:
        m._event("admitted", f"platform {t.name} admitted: budget {t.budget:g}, "
                 f"controller {t.controller.policy}", t.name)


def launcher(m: ManagerState, t: Template, owner: str) -> Callable[[str, str, int], Launch]:
    """How each VM of template ``t`` starts (``launcher(app, vm, index)``): its cluster's
    command in its own working directory, as its owner, with the environment of §4.2.2."""
    from merkat.backends.local import Launch
    from merkat.service import tenants

    monitored = t.monitored

    def launch(app: str, vm: str, index: int) -> Launch:
        cluster, k = t.cluster_of(index)
        if cluster.name == monitored.name and k == 0:
            m.backend.monitored[app] = vm
        m.vm_index[vm] = index
        master = t.clusters[[c.name for c in t.clusters].index(cluster.depends)] \
            if cluster.depends else cluster
        ident = m.tenants.identity(owner)  # its error is the VM's, as data
        cwd = tenants.work_dir(ident, app, cluster.name, k)
        env = {"MERKAT_MASTER": f"{app}/{master.name}-0", "MERKAT_MASTER_HOST": "127.0.0.1",
               "MERKAT_CLUSTER_INDEX": str(k),
               "MERKAT_SHARED": str(tenants.shared_dir(ident, app))}
        return Launch(cluster.command, cluster.name, index, env, str(cwd),
                      memory_floor=max(cluster.min_memory, 16.0),
                      # an error here is the VM's, as data; a re-adopted VM skips it
                      setup=lambda: files.prepare(ident, app, cluster.name, k,
                                                  cluster.files_in),
                      identity=ident, pids=m.tenants.pids(cluster.pids),
                      user_env=dict(cluster.env),
                      state=cluster.state.model_dump() if cluster.state else None,
                      memory_restart=cluster.memory_resize == "restart")

    return launch
