"""The dashboard in a real browser: headless Chromium (Debian's ``/usr/bin/chromium``, driven by
playwright without downloading a browser) against a running server with a demo workload.

Two platforms share one node: ``rich`` (budget 1000) and ``poor`` (0.003 per period, renewed);
both want the whole node (performance-partial), so the price climbs until ``poor`` cannot
keep a quarter of its VM and suspends (about the 7th period; 2 s periods). The test signs in, checks that
the price chart has points and the platform table lists both platforms, and that the suspend
reaches the event log within two periods of the backend doing it. It saves a screenshot in
the test's folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
PERIOD = 2.0
TEMPLATE = """\
name: {name}
controller: {{policy: performance-partial, params: {{backoff_max: 0}}}}
budget: {budget}
renewal: {renewal}
clusters:
  - name: main
    command: "exec sleep 600"
    cpu: 2
    memory: 64
    min_memory: 16
"""


def _need_browser() -> None:
    if not Path(CHROMIUM).exists() or shutil.which("chromium") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI: /usr/bin/chromium is missing (make chromium installs it)")
        pytest.skip("no /usr/bin/chromium (make chromium installs it)")
    pytest.importorskip("playwright.sync_api")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[str, str, Any]]:
    """A running server (API + period loop + local backend without cgroup limits)."""
    from merkat.bench.web import running_server

    with running_server(tmp_path / "data", PERIOD, user="alice", admin=False, budget=10_000) as s:
        yield s.base, s.key, s.manager


@pytest.mark.slow  # a browser and a live server: ~11 s
def test_dashboard_live_in_headless_chromium(server: Any, tmp_path: Path) -> None:
    _need_browser()
    from playwright.sync_api import sync_playwright

    base, key, manager = server
    store = manager.store
    for name, budget, renewal in (("rich", 1000, 0), ("poor", 0.003, 0.003)):
        manager.submit("alice", _parse(TEMPLATE.format(name=name, budget=budget,
                                                       renewal=renewal)))  # fmt: skip
    with sync_playwright() as pw:
        browser = pw.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--no-first-run", "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        # Record when each event reaches the page's log (the page's clock is the machine's).
        page.add_init_script("""
            window.arrivals = {};
            document.addEventListener('DOMContentLoaded', () => new MutationObserver(ms => {
                for (const m of ms) for (const n of m.addedNodes)
                    if (n.dataset && n.dataset.id) window.arrivals[n.dataset.id] = Date.now() / 1000;
            }).observe(document.getElementById('events'), {childList: true}));
        """)
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{base}/")
        # A wrong key is refused on the form.
        page.fill("#key", "mk_wrong")
        page.click("#login button[type=submit]")
        page.wait_for_function("document.getElementById('login-error').textContent !== ''")
        assert "not valid" in page.inner_text("#login-error")
        page.fill("#key", key)
        page.click("#login button[type=submit]")
        page.wait_for_selector("#dash:not([hidden])")
        page.wait_for_function(
            "document.querySelectorAll('#platforms tbody tr').length === 2", timeout=15_000
        )
        names = page.eval_on_selector_all(
            "#platforms tbody tr", "rows => rows.map(r => r.dataset.platform)"
        )
        assert sorted(names) == ["poor", "rich"]
        page.wait_for_selector('#events li[data-kind="vm-suspend"]', timeout=60_000)
        suspend = next(e for e in store.events(0, 10_000) if e["kind"] == "vm-suspend")
        assert "poor/" in suspend["message"]
        arrived = page.evaluate(f"window.arrivals['{suspend['id']}']")
        assert arrived is not None and arrived - suspend["time"] <= 2 * PERIOD, (
            arrived, suspend["time"])  # fmt: skip
        # The price chart has points, and as many as the server's history (give or take the
        # period that may land between the two reads).
        recorded = len(store.prices(0.0, 100_000))
        assert recorded >= 5
        page.wait_for_function(  # the chart catches up with the server's history
            f"window.merkatDashboard.prices[0].length >= {recorded}", timeout=20_000
        )
        points = page.evaluate("window.merkatDashboard.prices[0].length")
        assert recorded <= points <= len(store.prices(0.0, 100_000))
        assert page.locator("#price-chart canvas").count() == 1
        state = page.inner_text('#platforms tr[data-platform="poor"] td:nth-child(3)')
        assert state in ("suspended", "running")
        assert page.inner_text("#nodes tbody tr td:first-child") == "node0"
        page.screenshot(path=str(tmp_path / "dashboard.png"), full_page=True)
        browser.close()
    assert errors == []
    assert (tmp_path / "dashboard.png").stat().st_size > 10_000


def _parse(text: str) -> Any:
    from merkat.service.templates import parse

    return parse(text)
