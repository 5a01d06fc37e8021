"""``merkat file put PATH`` / ``merkat file list`` / ``merkat file delete NAME``: your files on the server, the sources of a
template's ``files_in`` (docs/service.md, "Tenants and isolation"). ``merkat submit`` uploads
the template's ``files_in`` found beside it first (:func:`upload_files_in`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import typer

from merkat.cli._common import OutputFormat, OutputOption, emit, fail, print_table
from merkat.cli.api import Client, TokenOption, UrlOption, _q
from merkat.outputs import time_text

app = typer.Typer(help="Your files on the server (the sources of a template's files_in).",
                  no_args_is_help=True)

NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}$")


def _upload(client: Client, path: Path, name: str) -> dict[str, Any]:
    """Upload the regular file ``path`` as ``name``, read as it is sent (not whole first)."""
    import os
    import stat

    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below, after the upload
    except OSError as exc:
        fail(f"PATH: cannot read {path}: {exc.strerror or exc}")
    with f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):  # (a FIFO or device: no size, maybe no end)
            fail(f"PATH: {path} is not a file")
        out: dict[str, Any] = client.upload(f"/files/{_q(name)}", f, st.st_size)
    return out


@app.command("put")
def put(path: Path = typer.Argument(..., help="The file to upload."),
        name: str | None = typer.Option(None, "--name", help="Its name on the server "
                                        "(default: the file's name)."),
        output: OutputFormat = OutputOption, url: str | None = UrlOption,
        token: str | None = TokenOption) -> None:
    """Upload a file into your files on the server (replacing one of the same name)."""
    target = name or path.name
    if not NAME.match(target):
        fail(f"--name: {target!r} is not a file name (1-128 of A-Z a-z 0-9 _.+-, not starting "
             "with '.', '+' or '-')")
    if not path.is_file():
        fail(f"PATH: {path} is not a file")
    got = _upload(Client(url, token), path, target)
    emit(output, got, lambda: print(f"file {got['name']} uploaded ({got['size']} bytes)"))


@app.command("list")
def list_(output: OutputFormat = OutputOption, url: str | None = UrlOption,
          token: str | None = TokenOption) -> None:
    """Your files on the server."""
    data = Client(url, token).get("/files")
    emit(output, data, lambda: print_table(None, ["NAME", "SIZE", "MODIFIED"], [
        (f["name"], f["size"], time_text(f["modified"], "%Y-%m-%d %H:%M:%S"))
        for f in data["items"]]))


@app.command("delete")
def delete(name: str = typer.Argument(..., help="The file's name on the server."),
           output: OutputFormat = OutputOption, url: str | None = UrlOption,
           token: str | None = TokenOption) -> None:
    """Delete one of your files on the server (a platform already started keeps its copy)."""
    if not NAME.match(name):
        fail(f"NAME: {name!r} is not a file name (1-128 of A-Z a-z 0-9 _.+-, not starting "
             "with '.', '+' or '-')")
    Client(url, token).request("DELETE", f"/files/{_q(name)}")
    emit(output, {"name": name, "deleted": True}, lambda: print(f"file {name} deleted"))


def files_in(text: bytes, xml: bool) -> list[str]:
    """The ``files_in`` names of a template's text (none when it does not parse: the server
    says why at submission)."""
    names: list[str] = []
    try:
        if xml:
            import xml.etree.ElementTree as ET

            root = ET.fromstring(text)
            names = [(e.text or "").strip() for e in root.iter("files_in")]
        else:
            import yaml

            data = yaml.safe_load(text)
            for c in data.get("clusters", []) if isinstance(data, dict) else []:
                if isinstance(c, dict) and isinstance(c.get("files_in"), list):
                    names += [f for f in c["files_in"] if isinstance(f, str)]
    except Exception:  # a broken template: the server's error names the field
        return []
    return names


def upload_files_in(client: Client, template: Path, text: bytes, xml: bool) -> None:
    """Upload each ``files_in`` name that is a plain file name and a file beside ``template``
    (others are expected on the server already); one line each on stderr."""
    for name in dict.fromkeys(files_in(text, xml)):
        local = template.parent / name
        if NAME.match(name) and local.is_file():
            got = _upload(client, local, name)
            print(f"uploaded {name} ({got['size']} bytes)", file=sys.stderr)
