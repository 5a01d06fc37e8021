"""The web pieces as FastAPI routes: ``GET /metrics`` and the dashboard (``GET /`` and its
assets under ``/static``). :func:`install` is the one call the service's app makes.

``/metrics`` needs no API key (Prometheus scrapes without one) and shows no user or platform
id; the dashboard's page is public too, but everything it shows comes from the API with the
key the user types in (kept in the browser's sessionStorage).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Response
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

from merkat.web.metrics import CONTENT_TYPE, MarketMetrics

STATIC = Path(str(resources.files("merkat.web") / "static"))


def install(app: FastAPI, metrics: MarketMetrics | None = None, dashboard: bool = True) -> None:
    """Add ``GET /metrics`` (when ``metrics`` is given) and the dashboard to ``app``."""
    if metrics is not None:

        @app.get("/metrics", include_in_schema=False)
        def prometheus_metrics() -> Response:
            return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    if dashboard:
        index = (STATIC / "index.html").read_text(encoding="utf-8")

        @app.get("/", include_in_schema=False, response_class=HTMLResponse)
        def dashboard_page() -> HTMLResponse:
            return HTMLResponse(index, headers={"Cache-Control": "no-cache"})

        app.mount("/static", StaticFiles(directory=STATIC), name="merkat-static")
