"""``merkat user list | remove | rotate-key | quota``: the admin's commands on the data
directory's users (as ``merkat user add``; the running server reads the same database at
every request, so a removed or rotated key is refused at once: docs/service.md, "Tenants").
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import (
    EXIT_FAILURE,
    OutputFormat,
    OutputOption,
    emit,
    fail,
    print_table,
)
from merkat.cli.service import ConfigOption, DataDirOption, _config, user_app

QUOTAS = ("platforms", "vms", "vms_per_platform", "template_bytes")


@contextmanager
def _store(config: Path | None, data_dir: Path | None) -> Iterator[tuple[Any, Any]]:
    """The configuration and the store of the data directory (closed on exit)."""
    from merkat.bank.errors import BankError
    from merkat.service.db import open_store

    cfg: Any = _config(config, data_dir=data_dir)
    url = cfg.database
    if url.startswith("sqlite:///") and not Path(url[len("sqlite:///"):]).is_file():
        # a mistyped --data-dir: say so, rather than create an empty server there and
        # answer 'unknown user' (or list nobody)
        fail(f"--data-dir: no merkat server data in {cfg.data_dir} (no "
             f"{Path(url[len('sqlite:///'):]).name}); give the server's --data-dir (merkat "
             "user add creates it)")
    try:
        store = open_store(cfg.database)
    except BankError as exc:
        fail(str(exc), EXIT_FAILURE)
    try:
        yield cfg, store
    finally:
        store.close()


def _describe(cfg: Any, store: Any, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Each user as ``user list -o json`` prints her: admin, keys, quotas (effective) and
    overrides, her use (platforms that have not ended, their VMs)."""
    from merkat.service import quotas as q

    table = q.overrides(store.engine)
    keys = store.key_counts()
    use: dict[str, dict[str, int]] = {}
    for row in store.platforms(states=q.ACTIVE):
        u = use.setdefault(row.owner, {"platforms": 0, "vms": 0})
        u["platforms"] += 1
        u["vms"] += max(q.template_size(row.template), len(store.vms(row.name)))
    out = []
    for user in store.users():
        if names is not None and user.name not in names:
            continue
        lim = q.limits(cfg.quotas, store.engine, user.name, table)
        out.append({"name": user.name, "admin": user.admin, "keys": keys.get(user.name, 0),
                    "quotas": lim.model_dump(), "overrides": table.get(user.name, {}),
                    "use": use.get(user.name, {"platforms": 0, "vms": 0})})
    return out


def _quota_cell(u: dict[str, Any], k: str) -> str:
    return f"{u['quotas'][k]}{'*' if k in u['overrides'] else ''}"


@user_app.command("list")
def user_list(config: Path | None = ConfigOption, data_dir: Path | None = DataDirOption,
              output: OutputFormat = OutputOption) -> None:
    """The users, their keys, use and quotas (* : set for this user, else the server's
    default)."""
    with _store(config, data_dir) as (cfg, store):
        items = _describe(cfg, store)
    emit(output, {"items": items}, lambda: print_table(
        None, ["NAME", "ADMIN", "KEYS", "PLATFORMS", "VMS", "VMS/PLATFORM", "TEMPLATE BYTES"],
        [[u["name"], "yes" if u["admin"] else "no", u["keys"],
          f"{u['use']['platforms']}/{_quota_cell(u, 'platforms')}",
          f"{u['use']['vms']}/{_quota_cell(u, 'vms')}",
          _quota_cell(u, "vms_per_platform"), _quota_cell(u, "template_bytes")]
         for u in items]))


@user_app.command("remove")
def user_remove(name: str, config: Path | None = ConfigOption,
                data_dir: Path | None = DataDirOption,
                output: OutputFormat = OutputOption) -> None:
    """Remove a user and revoke her API keys at once. Refused (exit 1) while she has
    platforms that have not ended; her bank account and its money stay."""
    from merkat.service.db import StoreError

    with _store(config, data_dir) as (_, store):
        if name not in {u.name for u in store.users()}:
            fail(f"NAME: unknown user {name!r}")
        try:
            store.remove_user(name)
        except StoreError as exc:
            fail(str(exc), EXIT_FAILURE)
    emit(output, {"name": name, "removed": True},
         lambda: print(f"user {name} removed; her API keys no longer work"))


@user_app.command("rotate-key")
def user_rotate_key(name: str, config: Path | None = ConfigOption,
                    data_dir: Path | None = DataDirOption,
                    parsable: bool = typer.Option(False, "--parsable",
                                                  help="Print the new API key alone."),
                    output: OutputFormat = OutputOption) -> None:
    """Revoke every API key of a user and print her new one (shown once)."""
    from merkat.service.db import StoreError

    with _store(config, data_dir) as (_, store):
        try:
            key = store.rotate_key(name)
        except StoreError as exc:
            fail(f"NAME: {exc}")
    if parsable:
        print(key)
        return
    emit(output, {"name": name, "key": key},
         lambda: print(f"user {name}: old API keys revoked; new key (shown once):\n{key}"))


def _limit(flag: str) -> Any:
    return typer.Option(None, flag, min=0, max=2**31 - 1,
                        help="The user's limit (0 forbids; see docs/service.md, Tenants).")


@user_app.command("quota")
def user_quota(
    name: str,
    platforms: int | None = _limit("--platforms"),
    vms: int | None = _limit("--vms"),
    vms_per_platform: int | None = _limit("--vms-per-platform"),
    template_bytes: int | None = _limit("--template-bytes"),
    reset: bool = typer.Option(False, "--reset", help="Drop her overrides first: the "
                               "server's defaults apply again."),
    config: Path | None = ConfigOption,
    data_dir: Path | None = DataDirOption,
    output: OutputFormat = OutputOption,
) -> None:
    """Show a user's quotas, or set them (each option overrides the server's default for
    her; a running server applies it to her next submission and its next period)."""
    from merkat.service import quotas as q
    from merkat.service.db import StoreError

    values = {k: v for k, v in zip(QUOTAS, (platforms, vms, vms_per_platform, template_bytes),
                                   strict=True) if v is not None}
    with _store(config, data_dir) as (cfg, store):
        if name not in {u.name for u in store.users()}:
            fail(f"NAME: unknown user {name!r}")
        try:
            if reset:
                q.reset(store.engine, name)
            if values:
                q.set_quota(store.engine, name, dict(values))
        except (StoreError, ValueError) as exc:
            fail(str(exc))
        (u,) = _describe(cfg, store, [name])
    emit(output, u, lambda: print_table(
        f"quotas of {name} (* : set for her)", ["QUOTA", "LIMIT", "USE"],
        [[k, _quota_cell(u, k), u["use"].get(k, "-")] for k in QUOTAS]))
