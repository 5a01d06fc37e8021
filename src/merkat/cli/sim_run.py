"""``merkat sim run``: replay a trace under one scheduler (a batch baseline or the market),
and the ``--policy-param`` parser the experiments share.

Bad input (flags, trace lines) gives a one-line ``error: ...`` naming the flag or ``file:line``
and exit code 2.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import LazyProgress, OutputFormat, OutputOption, emit, err_console, fail
from merkat.cli.sim import app, check, summary_table
from merkat.cli.validate import check_choice, check_float, check_int
from merkat.defaults import (
    ADMISSION_S,
    BALANCER,
    BUDGET_BASE,
    CHARGE_BY,
    DEADLINE_FACTOR_MAX,
    DEADLINE_FACTOR_MIN,
    ECONOMY,
    MECHANISM,
    PERIOD_S,
    POLICY,
)
from merkat.sim.schedulers import SCHEDULERS
from merkat.workload.traces import find_trace


def _param_value(text: str) -> Any:
    """A --policy-param value: an int, a float, true/false, or the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def parse_policy_params(items: list[str], policy: str | None) -> dict[str, Any]:
    """``--policy-param KEY=VALUE`` flags as keyword arguments of ``policy``, checked against
    its declaration (``check_params``: an unknown key, a bad value or a key given twice is a
    one-line error naming ``--policy-param KEY``, exit 2) and by building one controller."""
    if items and policy is None:
        fail("--policy-param: only with --scheduler market")
    params: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not key.strip():
            fail(f"--policy-param: expected KEY=VALUE, got {item!r}")
        if key.strip() in params:  # (the last one silently won)
            fail(f"--policy-param {key.strip()}: given twice")
        params[key.strip()] = _param_value(value)
    if params and policy is not None:
        from merkat.control.registry import ParamError, PolicyError, check_params, make_policy

        try:  # the policy's declaration (control/params.py), then its constructor
            params = check_params(policy, params)
            make_policy(policy, **params)
        except ParamError as exc:
            fail(f"--policy-param {exc}")
        except PolicyError as exc:
            fail(f"--policy-param: {exc}")
    return params


@app.command("run")
def run_cmd(
    trace: str = typer.Option(
        ..., "--trace", help="A trace name (`merkat traces list`) or an SWF file (.swf, .swf.gz)."
    ),
    scheduler: str = typer.Option(
        ..., "--scheduler", help=" | ".join(SCHEDULERS) + " (merkat.sim.schedulers)"
    ),
    out: Path = typer.Option(..., "--out", help="Directory for jobs.csv and summary.json."),
    jobs: int | None = typer.Option(None, "--jobs", help="Simulate at most N jobs."),
    skip: int = typer.Option(0, "--skip", help="Skip the first N job records of the trace."),
    hosts: int | None = typer.Option(None, "--hosts", help="Number of hosts."),
    cores_per_host: int | None = typer.Option(None, "--cores-per-host", help="Cores per host."),
    memory_per_host: float | None = typer.Option(
        None, "--memory-per-host", help="Memory per host, MiB (default: unconstrained)."
    ),
    interarrival_factor: float = typer.Option(
        1.0, "--interarrival-factor", help="Multiply inter-arrival times (0.1 = heavy load)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of the run: the jobs' SLO attributes and the controllers' draws."),
    strict: bool = typer.Option(False, "--strict", help="Fail on the first bad trace line."),
    deadline_min: float = typer.Option(DEADLINE_FACTOR_MIN, "--deadline-factor-min"),
    deadline_max: float = typer.Option(DEADLINE_FACTOR_MAX, "--deadline-factor-max"),
    budget_base: float = typer.Option(
        BUDGET_BASE, "--budget-base", help="B_base (budget = B_base/factor)."
    ),
    policy: str | None = typer.Option(
        None, "--policy", help="With --scheduler market: the controllers' policy "
        f"(default {POLICY})."
    ),
    market: str = typer.Option(
        MECHANISM, "--market",
        help="With --scheduler market: the market mechanism — proportional-share (Merkat), "
             "tycoon (an auction per host) or posted (grid-cloud posted prices, eq. 5).",
    ),
    policy_param: list[str] = typer.Option(
        [], "--policy-param",
        help="With --scheduler market: KEY=VALUE, a parameter of the policy (repeatable; "
             "`merkat policy list` shows them), e.g. forecast=ar.",
    ),
    period: float | None = typer.Option(
        None, "--period", help="With --scheduler market: the scheduling period, seconds "
        f"(default {PERIOD_S:g})."
    ),
    admission: float | None = typer.Option(
        None, "--admission", metavar="SECONDS",
        help="With --scheduler market: the applications manager admits new applications "
        f"between periods every SECONDS (Merkat §4.2.2: {ADMISSION_S:g}, the default); 0 makes them wait "
        "for the next period.",
    ),
    workers: int | None = typer.Option(
        None,
        "--workers",
        help="With --scheduler market: cut the trace where the cluster is empty "
        "and run the pieces on this many processes (same results; default 1).",
    ),
    economy: str | None = typer.Option(
        None, "--economy", help="With --scheduler market: themis (users receive a per-period "
        "allowance) | closed (no money enters after the initial budgets; the Virtual Bank "
        "returns the provider's income to the users; default themis).",
    ),
    charging: str | None = typer.Option(
        None, "--charging", help="With --scheduler market: bid (VMs pay their bids, the "
        "default) | use (VMs pay what they use, the rest of the deposit refunded).",
    ),
    balancer: str | None = typer.Option(
        None, "--balancer", help="With --scheduler market: the load balancer — merkat (the VM "
        "with the largest allocation error moves to the node minimising it, the default) | "
        "themis (Themis Fig. 2: the least valuable VM of the most overloaded node moves to the "
        "least loaded; stop after 10 non-improving iterations).",
    ),
    moldable: bool = typer.Option(
        False, "--moldable", help="With --scheduler market: a job may run on 1 to 2 x the "
        "processes it asked for, at Amdahl's speed-up (--serial-fraction), so that the "
        "horizontal policies (merkat-horizontal, scale-multi-vms, merkat-combined) run on "
        "trace jobs.",
    ),
    serial_fraction: float | None = typer.Option(
        None, "--serial-fraction", help="With --moldable: Amdahl's serial fraction of every "
        "job, in [0, 1) (default 0.05).",
    ),
    force: bool = typer.Option(
        False, "--force", help="Replace the results of a previous run in a non-empty --out."
    ),
    output: OutputFormat = OutputOption,
) -> None:
    """Replay a trace under one scheduler; write DIR/jobs.csv and DIR/summary.json.

    The files appear together when the run ends (written in a temporary directory that then
    replaces DIR); a non-empty DIR is refused before the run unless --force.

    Without --hosts/--cores-per-host the machine is the trace header's MaxProcs as one pool.
    """
    from merkat.sim.run import run_trace
    from merkat.workload.jobs import SloConfig
    from merkat.workload.swf import SwfError
    from merkat.worlds.merkat.options import MarketConfig, RunOptions

    check_choice("--scheduler", scheduler, SCHEDULERS)
    if not SCHEDULERS[scheduler].market:  # the market's options mean nothing to a batch run
        given = {"--policy": policy, "--period": period, "--admission": admission,
                 "--workers": workers, "--economy": economy, "--charging": charging,
                 "--balancer": balancer, "--moldable": moldable or None}
        for flag, value in given.items():
            check(value is None, f"{flag}: only with --scheduler market (the {scheduler} "
                   "scheduler has no controllers, periods or money)")
    policy = POLICY if policy is None else policy
    period = PERIOD_S if period is None else period
    admission = ADMISSION_S if admission is None else admission
    workers = 1 if workers is None else workers
    economy = ECONOMY if economy is None else economy
    charging = CHARGE_BY if charging is None else charging
    balancer = BALANCER if balancer is None else balancer
    check(serial_fraction is None or moldable, "--serial-fraction: only with --moldable")
    from merkat.worlds.merkat.moldable import SERIAL_FRACTION

    serial_fraction = SERIAL_FRACTION if serial_fraction is None else serial_fraction
    check(0 <= serial_fraction < 1,
          f"--serial-fraction must be in [0, 1), got {serial_fraction:g}")
    check(jobs is None or jobs >= 1, f"--jobs must be >= 1, got {jobs}")
    check(skip >= 0, f"--skip must be >= 0, got {skip}")
    check_int("--hosts", hosts, 1, 1_000_000)
    check_int("--cores-per-host", cores_per_host, 1, 1_000_000)
    check_int("--seed", seed, 0, 2**32 - 1)
    check_float("--memory-per-host", memory_per_host, 0, 1e12, lo_open=True)
    check((hosts is None) == (cores_per_host is None), "--hosts and --cores-per-host go together")
    check_float("--interarrival-factor", interarrival_factor, 0, 1000, lo_open=True)
    check_float("--deadline-factor-min", deadline_min, 0, 1000, lo_open=True)
    check_float("--deadline-factor-max", deadline_max, 0, 1000, lo_open=True)
    check(deadline_min <= deadline_max, "--deadline-factor-min/max must satisfy min <= max")
    check_float("--budget-base", budget_base, 0, 1e9, lo_open=True)
    check_float("--period", period, 1, 86400)
    check_float("--admission", admission, 0, 86400)
    check_int("--workers", workers, 1, 1024)
    from merkat.market.types import BALANCERS
    from merkat.runtime import economy as money

    check_choice("--economy", economy, money.ECONOMIES)
    check_choice("--charging", charging, money.CHARGING)
    check_choice("--balancer", balancer, BALANCERS)
    try:
        trace_path = find_trace(trace)
    except FileNotFoundError as e:
        fail(f"--trace: {e}")
    from merkat.outputs import output_dir, prepare_out_dir

    prepare_out_dir(out, force=force)  # before the run, not after it
    takes_market = SCHEDULERS[scheduler].market  # the market's options apply
    if takes_market:
        from merkat.cli.policy import trace_policies
        from merkat.control.registry import POLICIES

        check_choice("--policy", policy, POLICIES)
        usable = trace_policies()
        drives = POLICIES[policy].applies_to
        if moldable:
            usable += [p for p in sorted(POLICIES) if "moldable" in POLICIES[p].applies_to]
        hint = (" or add --moldable (a job may then use more or fewer processes than it asked "
                "for)" if "moldable" in drives and not moldable else "")
        check(
            policy in usable,
            f"--policy {policy}: not usable on the "
            f"{'moldable' if moldable else 'rigid'} jobs of a trace (it drives "
            f"{', '.join(drives)} applications); use one of: "
            f"{', '.join(usable)} (merkat policy list){hint}",
        )
    params = parse_policy_params(policy_param, policy if takes_market else None)
    if market != MECHANISM:
        from merkat.market.mechanisms import MECHANISMS

        check(takes_market, "--market: only with --scheduler market")
        check_choice("--market", market, MECHANISMS)
        check(balancer == BALANCER, f"--balancer {balancer}: only with --market "
               "proportional-share (the other mechanisms place no VMs to balance)")
    opts = RunOptions(
        trace=trace_path,
        scheduler=scheduler,
        out=out,
        jobs=jobs,
        skip=skip,
        hosts=hosts,
        cores_per_host=cores_per_host,
        memory_per_host=memory_per_host,
        interarrival_factor=interarrival_factor,
        seed=seed,
        strict=strict,
        slo=SloConfig(deadline_min, deadline_max, budget_base),
        market_config=MarketConfig(policy=policy, period=period, economy=economy,
                                   charging=charging, policy_params=params, market=market,
                                   admission=admission or None, moldable=moldable,
                                   serial_fraction=serial_fraction),
        workers=workers,
        balancer=balancer,
    )
    bars: list[LazyProgress] = []
    t0 = time.perf_counter()

    def factory(total: int) -> Callable[[int], None]:
        bars.append(LazyProgress(total, f"simulating ({scheduler})", t0))
        return bars[-1]

    try:
        with output_dir(out, force=force) as tmp:
            summary = run_trace(dataclasses.replace(opts, out=tmp), factory)
    except (SwfError, ValueError) as e:
        fail(str(e))
    except OSError as e:
        fail(f"--out: cannot write to {out}: {e.strerror or e}")
    finally:
        for b in bars:
            b.close()
    if summary["skipped_lines"]:
        first = summary["bad_lines"][0] if summary["bad_lines"] else ""
        err_console().print(
            f"warning: skipped {summary['skipped_lines']} bad trace line(s); first: {first}",
            markup=False,
            highlight=False,
        )
    emit(output, summary, lambda: summary_table([(str(out), summary)]))
