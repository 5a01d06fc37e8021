"""What ``merkat server`` serves: the service's REST API (:func:`merkat.service.api.create_app`)
with the dashboard at ``/`` and Prometheus' ``/metrics`` mounted on it (:mod:`.routes`), the
metrics fed after each period (the manager's observers) and with the period loop's health
(:class:`merkat.service.loop.LoopCollector`).

The service does not know the web (docs/architecture.md, "Layers"): the CLI hands this
factory to :class:`merkat.service.server.Service`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import FastAPI

    from merkat.service.manager import Manager


def create_app(manager: Manager) -> FastAPI:
    """The API of ``manager`` with the dashboard and ``/metrics`` (module doc)."""
    from merkat.service.api import create_app as api_app
    from merkat.service.loop import LoopCollector
    from merkat.web.metrics import MarketMetrics
    from merkat.web.routes import install

    app = api_app(manager)
    prometheus = MarketMetrics()
    manager.observers.append(prometheus.observe_platform)
    app.state.metrics = prometheus
    prometheus.registry.register(LoopCollector(manager))
    install(app, prometheus)
    return app
