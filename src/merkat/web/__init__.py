"""What people look at: the dashboard (``GET /``), Prometheus metrics (``GET /metrics``).

:mod:`merkat.web.metrics` is the metrics registry fed by the period loop;
:mod:`merkat.web.dashboard` the FastAPI router that serves the dashboard's page and its
vendored assets. Both plug into the service's app in one place each.
"""
