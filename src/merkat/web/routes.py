"""The web pieces as FastAPI routes: ``GET /metrics`` and the dashboard (``GET /`` and its
assets under ``/static``). :func:`install` is the one call :func:`merkat.web.app.create_app` makes on the service's app.

``/metrics`` needs no API key (Prometheus scrapes without one) and shows no user or platform
id; the dashboard's page is public too, but everything it shows comes from the API with the
key the user types in (kept in the browser's sessionStorage).
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from merkat.web.metrics import CONTENT_TYPE, MarketMetrics

STATIC = Path(str(resources.files("merkat.web") / "static"))
_LINK = re.compile(r'<link rel="stylesheet" href="/static/([^"]+)">')
_SCRIPT = re.compile(r'<script src="/static/([^"]+)"></script>')


def inline_page(html: str) -> str:
    """``index.html`` with its style sheets and scripts from ``/static`` inlined: the first
    load is one request instead of five (the files stay served under ``/static``)."""

    def read(name: str) -> str:
        text = (STATIC / name).read_text(encoding="utf-8")
        if re.search(r"</(script|style)", text, re.IGNORECASE):
            raise ValueError(f"{name} cannot be inlined (it contains a closing tag)")
        return text

    html = _LINK.sub(lambda m: f"<style>/* {m.group(1)} */\n{read(m.group(1))}</style>", html)
    return _SCRIPT.sub(lambda m: f"<script>/* {m.group(1)} */\n{read(m.group(1))}</script>", html)


def install(app: FastAPI, metrics: MarketMetrics | None = None, dashboard: bool = True) -> None:
    """Add ``GET /metrics`` (when ``metrics`` is given) and the dashboard to ``app``."""
    if metrics is not None:

        @app.get("/metrics", include_in_schema=False)
        def prometheus_metrics() -> Response:
            return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    if dashboard:
        index = inline_page((STATIC / "index.html").read_text(encoding="utf-8"))

        @app.get("/", include_in_schema=False, response_class=HTMLResponse)
        def dashboard_page() -> HTMLResponse:
            return HTMLResponse(index, headers={"Cache-Control": "no-cache"})

        app.mount("/static", StaticFiles(directory=STATIC), name="merkat-static")
