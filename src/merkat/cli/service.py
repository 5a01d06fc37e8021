"""``merkat server``, ``merkat user add`` and ``merkat demo``: the live service's own commands.

Heavy libraries (FastAPI, uvicorn, SQLAlchemy) are imported inside the commands.
"""

from __future__ import annotations

from pathlib import Path

import typer

from merkat.cli._common import EXIT_FAILURE, OutputFormat, OutputOption, emit, fail
from merkat.defaults import ADMISSION_S, LIVE_PERIOD_S

user_app = typer.Typer(help="Users of the live service and their API keys.",
                       no_args_is_help=True)

ConfigOption = typer.Option(None, "--config", help="YAML config file (see docs/service.md).")
DataDirOption = typer.Option(None, "--data-dir",
                             help="State directory (default: the user's data dir).")


def _config(config: Path | None, **overrides: object) -> object:
    from merkat.service.config import ConfigError, load_config

    try:
        return load_config(config, **overrides)
    except ConfigError as exc:
        fail(str(exc))


def server(
    config: Path | None = ConfigOption,
    host: str | None = typer.Option(None, "--host", help="Listen address (127.0.0.1)."),
    port: int | None = typer.Option(None, "--port", help="Port (8080).", min=0, max=65535),
    data_dir: Path | None = DataDirOption,
    period: float | None = typer.Option(
        None, "--period", help=f"Scheduling period, s ({LIVE_PERIOD_S:g}; 0.1 to 86400)."),
    admission: float | None = typer.Option(None, "--admission",
                                           help=f"Admission interval, s ({ADMISSION_S:g}; "
                                           "0.1 to 86400)."),
    backend: str | None = typer.Option(None, "--backend",
                                       help="Backend by name: local (default), kubernetes."),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="kubernetes backend: kubeconfig file (default: in-cluster, "
        "$KUBECONFIG, ~/.kube/config)."),
    namespace: str | None = typer.Option(None, "--namespace",
                                         help="kubernetes backend: the pods' namespace (merkat)."),
    economy: str | None = typer.Option(
        None, "--economy", help="Where money comes from: themis (renewals minted each period; "
        "default) or closed (renewals from the owner's account; the provider's income back to "
        "the users every --redistribute-every periods)."),
    charging: str | None = typer.Option(
        None, "--charging", help="What a VM pays: bid (its bid; default) or use (the CPU its "
        "cgroup measured, at the period's price; the rest of the bid refunded)."),
    redistribute_every: int | None = typer.Option(
        None, "--redistribute-every", min=1,
        help="closed economy: periods between the Virtual Bank's redistributions (12)."),
    reserve_cpu: float | None = typer.Option(
        None, "--reserve-cpu", min=0.0, help="local backend: cores kept for merkat and the "
        "system; the VMs together get the rest, and the market sells only that (0.5)."),
    reserve_memory: float | None = typer.Option(
        None, "--reserve-memory", min=0.0,
        help="local backend: MiB kept for merkat and the system (512)."),
) -> None:
    """Run the live service: REST API, applications manager and period loop (Ctrl-C stops
    it and destroys its VMs: processes, or pods with --backend kubernetes). An ended
    platform's unspent budget goes back to its owner."""
    from merkat.service.config import check_seconds
    from merkat.service.server import Service
    from merkat.web.app import create_app

    for flag, value in (("--period", period), ("--admission", admission)):
        if value is not None:  # named as typed (the config's own check says period:)
            try:
                check_seconds(flag[2:], value)
            except ValueError as exc:
                fail(f"{flag}: {exc}")
    cfg = _config(config, host=host, port=port, data_dir=data_dir, period=period,
                  admission=admission, economy=economy, charging=charging,
                  redistribute_every=redistribute_every)
    updates = {k: v for k, v in (("name", backend), ("kubeconfig", kubeconfig),
                                 ("namespace", namespace), ("reserve_cpu", reserve_cpu),
                                 ("reserve_memory", reserve_memory)) if v is not None}
    if updates:
        from pydantic import ValidationError

        from merkat.service.config import BackendConfig, first_error

        try:
            cfg.backend = BackendConfig(**{**cfg.backend.model_dump(),  # type: ignore[attr-defined]
                                           **updates})
        except ValidationError as exc:
            fail(f"backend.{first_error(exc)}")
    from merkat.service.server import ServiceError

    try:
        svc = Service(cfg, app=create_app)  # type: ignore[arg-type]
    except ServiceError as exc:  # the port is taken, another server holds the data dir
        fail(str(exc), EXIT_FAILURE)
    except ValueError as exc:  # an unknown backend, unusable credentials: bad input
        fail(f"cannot start the server: {exc}")
    except Exception as exc:  # the database or backend cannot be opened: one line
        fail(f"cannot start the server: {exc}", EXIT_FAILURE)
    from merkat.cli.errors import Terminated
    from merkat.service.server import log

    try:
        svc.serve()
    except ServiceError as exc:
        fail(str(exc), EXIT_FAILURE)
    except (Terminated, KeyboardInterrupt):
        # SIGTERM or Ctrl-C is how a service is stopped (systemd, kill): serve() has already
        # stopped the loop and destroyed the VMs, so this is a clean stop, not an error.
        # (uvicorn re-raises the signal it caught once it has shut down.)
        log("stopped")


@user_app.command("add")
def user_add(
    name: str,
    admin: bool = typer.Option(False, "--admin", help="May see and act on everything."),
    budget: str = typer.Option("0", "--budget", help="Credits minted into her account."),
    config: Path | None = ConfigOption,
    data_dir: Path | None = DataDirOption,
    parsable: bool = typer.Option(False, "--parsable", help="Print the API key alone."),
    output: OutputFormat = OutputOption,
) -> None:
    """Create a user and print her API key (once: only its hash is stored)."""
    from merkat.bank.errors import BankError
    from merkat.bank.money import format_amount, parse_amount
    from merkat.service.db import StoreError, open_store

    cfg = _config(config, data_dir=data_dir)
    try:
        amount = parse_amount(budget, "--budget", allow_zero=True)
    except BankError as exc:
        fail(str(exc))
    try:
        store = open_store(cfg.database)  # type: ignore[attr-defined]
    except (BankError, StoreError) as exc:
        fail(str(exc), EXIT_FAILURE)
    except OSError as exc:
        fail(f"data_dir: {exc.strerror or exc}", EXIT_FAILURE)
    try:
        from merkat.bank.policies import VIRTUAL_BANK

        key = store.add_user(name, admin, amount,
                             reserved=(cfg.provider, VIRTUAL_BANK))  # type: ignore[attr-defined]
    except (StoreError, BankError) as exc:
        fail(str(exc))
    finally:
        store.close()
    if parsable:
        print(key)
        return
    data = {"name": name, "admin": admin, "budget": format_amount(amount), "key": key}
    emit(output, data, lambda: print(f"user {name} created{' (admin)' if admin else ''}, budget "
                                     f"{format_amount(amount)}; API key (shown once):\n{key}"))


def demo(
    duration: float = typer.Option(150.0, "--duration", min=20.0, max=365 * 86400.0,
                                   help="Seconds to run before the report (at least 20, at "
                                   "most a year: its solver's deadline is 45 % of it)."),
    period: float = typer.Option(5.0, "--period", min=0.5, help="Scheduling period, s."),
    port: int = typer.Option(0, "--port", min=0, max=65535, help="API port (0: a free one)."),
    data_dir: Path | None = typer.Option(
        None, "--data-dir", help="State directory (default: a new temporary one, "
        "/tmp/merkat-demo-*, kept after the run for `merkat report`)."),
) -> None:
    """Run the live service on a demo with more demand than this machine can serve: a
    deadline solver outbids best-effort ones to meet its deadline, a price-limited one is
    suspended when the price climbs and resumed when it falls. Prints each period, then a
    report of what the market did (deadlines, bids and price, money, bank audit, HTML report);
    exit 0 when the deadline was met."""
    from merkat.report.live import write_html
    from merkat.service.demo import run_demo
    from merkat.service.server import ServiceError

    if period > duration / 10:
        fail(f"--period: at most a tenth of --duration ({duration / 10:g} s): the demo needs "
             f"periods to show what the market does, got {period:g}")
    try:
        code = run_demo(duration, period, port, data_dir, html_report=write_html)
    except KeyboardInterrupt:
        code = 130
    except ServiceError as exc:  # the port is taken, another server holds the data dir...
        fail(f"cannot start the demo's server: {exc}", EXIT_FAILURE)
    except OSError as exc:  # its API refused or did not answer a submission (URLError...)
        fail(f"the demo's server did not take its platforms: {exc}", EXIT_FAILURE)
    raise typer.Exit(code)
