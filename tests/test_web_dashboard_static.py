"""The dashboard's page and assets as the app serves them: everything local, nothing from a CDN."""

from __future__ import annotations

import re

from fastapi import FastAPI
from fastapi.testclient import TestClient

from merkat.web.routes import STATIC, install


def client() -> TestClient:
    app = FastAPI()
    install(app)
    return TestClient(app)


def test_page_and_assets_are_served_from_the_package() -> None:
    c = client()
    r = c.get("/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    page = r.text
    assert '<form id="login"' in page and 'id="price-chart"' in page
    # The page's own style sheets and scripts are inlined (one request), byte for byte ...
    source = (STATIC / "index.html").read_text()
    refs = re.findall(r'(?:src|href)="(/static/[^"]+)"', source)
    assert len(refs) == 4
    for url in refs:
        assert (STATIC / url.removeprefix("/static/")).read_text() in page
        # ... and still served under /static.
        asset = c.get(url)
        assert asset.status_code == 200, url
        assert asset.content == (STATIC / url.removeprefix("/static/")).read_bytes()
    assert re.findall(r'(?:src|href)="([^"]+)"', page) == ["data:,"]  # the empty favicon
    js = c.get("/static/vendor/uPlot.iife.min.js").text
    assert js.startswith("/*! https://github.com/leeoniya/uPlot (v1.6.32) */")
    assert "new uPlot(" in c.get("/static/dashboard.js").text


def test_no_network_at_run_time() -> None:
    for f in STATIC.rglob("*"):
        if f.suffix in (".html", ".js", ".css") and "vendor" not in f.parts:
            text = f.read_text(encoding="utf-8")
            assert not re.search(r"https?://(?!github\.com/leeoniya)", text), f
    assert (STATIC / "vendor" / "uPlot.LICENSE").read_text().startswith("The MIT License")
