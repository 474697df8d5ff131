"""The web timeline in real headless Chromium (Debian `chromium` and `chromium-driver`, driven by
Selenium): what the pages show, hover, zoom, links; and the screenshots kept under docs/.

Set WHYJOB_SCREENSHOTS=docs/screenshots to refresh the committed screenshots."""

from __future__ import annotations

import itertools
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
import uvicorn
from selenium import webdriver
from selenium.webdriver.chrome.service import Service as DriverService
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webelement import WebElement

from tests.api.conftest import TOKENS, World, access_for
from tests.standins.services import free_port
from whyjob.api.access import Principal
from whyjob.api.app import ApiOptions, create_app
from whyjob.core.evidence import Evidence, evidence_id

_OPS = Principal("ops", frozenset({"*"}))


@contextmanager
def _serving(app: object) -> Iterator[str]:
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))  # type: ignore[arg-type]
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(scope="module")
def site(world: World) -> Iterator[str]:
    with _serving(
        create_app(world.service, ApiOptions(access_for(world), login_links=True))
    ) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[webdriver.Chrome]:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    if binary is None or driver_path is None:
        raise RuntimeError(
            "chromium and chromedriver are needed: ./scripts/setup installs them (WHYJOB_TEST_DEBS)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1500,1000",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=DriverService(driver_path), options=options)
    yield driver
    driver.quit()


def _login(browser: webdriver.Chrome, site: str, who: str, next_path: str) -> None:
    browser.delete_all_cookies()
    browser.get(f"{site}/login?token={TOKENS[who]}&next={next_path}")


def _shoot(browser: webdriver.Chrome, name: str, tmp_path: Path) -> None:
    target = os.environ.get("WHYJOB_SCREENSHOTS")
    folder = Path(target) if target else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    assert browser.save_screenshot(str(folder / name))
    assert (folder / name).stat().st_size > 10_000


def test_the_index_lists_the_teams_experiments_with_status(
    browser: webdriver.Chrome, site: str, world: World, tmp_path: Path
) -> None:
    _login(browser, site, "ops", "/")
    rows = {
        r.get_attribute("data-experiment"): r.get_attribute("data-status")
        for r in browser.find_elements(By.CSS_SELECTOR, "#experiments tbody tr")
    }
    assert rows[world.a[1]] == "failed" and rows[world.b[1]] == "looping"
    browser.get(f"{site}/?status=looping")
    shown = [
        r.get_attribute("data-experiment")
        for r in browser.find_elements(By.CSS_SELECTOR, "#experiments tbody tr")
    ]
    assert world.b[1] in shown and world.a[1] not in shown
    _login(browser, site, "team-a", "/")
    shown = [
        r.get_attribute("data-experiment")
        for r in browser.find_elements(By.CSS_SELECTOR, "#experiments tbody tr")
    ]
    assert world.a[1] in shown and world.b[1] not in shown
    _shoot(browser, "experiments.png", tmp_path)


def _view(browser: webdriver.Chrome) -> tuple[float, float]:
    """The visible span of the timeline, in seconds after its start."""
    plot = browser.find_element(By.ID, "plot")
    return float(plot.get_dom_attribute("data-v0")), float(plot.get_dom_attribute("data-v1"))


def _number(element: WebElement, name: str) -> float:
    return float(element.get_attribute(name) or "nan")


def test_the_timeline_of_an_xid_shows_lanes_causes_and_evidence(
    browser: webdriver.Chrome, site: str, world: World, tmp_path: Path
) -> None:
    namespace, name = world.a
    _login(browser, site, "team-a", f"/experiments/{namespace}/{name}")
    verdict = browser.find_element(By.ID, "verdict")
    assert (
        verdict.get_attribute("data-category") == "gpu.xid"
        and verdict.get_attribute("data-grade") == "proven"
    )
    # Who acts on it, next to the verdict: a GPU fault is the infrastructure's.
    assert verdict.get_attribute("data-owner") == "infra"
    assert browser.find_element(By.ID, "owner").text == "owner: infra"
    lanes = [
        e.get_attribute("data-lane") for e in browser.find_elements(By.CSS_SELECTOR, ".lane-label")
    ]
    assert any(lane.startswith("rank:") for lane in lanes) and any(
        lane.startswith("node:") for lane in lanes
    )
    bars = browser.find_elements(By.CSS_SELECTOR, "rect.bar")
    assert {b.get_attribute("data-category") for b in bars} >= {"gpu.xid", "peer.failure"}
    xid_bar = next(b for b in bars if b.get_attribute("data-category") == "gpu.xid")
    assert xid_bar.get_attribute("fill") == "#c62828"  # coloured by cause
    assert xid_bar.get_attribute("data-owner") == "infra"
    # Marks: the Xid is a GPU-red diamond, the legend names colours and shapes.
    xids = browser.find_elements(By.CSS_SELECTOR, "g.lane use[data-kind='gpu.xid']")
    assert xids and {m.get_attribute("href") for m in xids} <= {"#xid-4", "#xid-5", "#xid-6"}
    assert "#c62828" in {m.get_attribute("fill") for m in xids}
    legend = browser.find_element(By.ID, "legend")
    assert {
        e.get_attribute("data-cause") for e in legend.find_elements(By.CSS_SELECTOR, "[data-cause]")
    } >= {"gpu", "peer.failure"}
    assert {
        e.get_attribute("data-shape") for e in legend.find_elements(By.CSS_SELECTOR, "[data-shape]")
    } >= {"xid", "termination"}
    # Hover: the detail appears next to the pointer.
    ActionChains(browser).move_to_element(xid_bar).perform()
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed() and "gpu.xid" in tip.text and "owner: infra" in tip.text
    # Zoom: the visible span halves, "all" shows everything and "failures" the opening view.
    opening = _view(browser)
    browser.find_element(By.ID, "zoom-in").click()
    v0, v1 = _view(browser)
    assert v1 - v0 == pytest.approx((opening[1] - opening[0]) / 2, abs=1)
    browser.find_element(By.ID, "zoom-reset").click()
    plot = browser.find_element(By.ID, "plot")
    assert _view(browser) == (0, _number(plot, "data-end"))
    browser.find_element(By.ID, "zoom-focus").click()
    assert _view(browser) == opening
    _shoot(browser, "timeline-xid79.png", tmp_path)
    # The narrative's evidence links open the record, raw source included.
    link = browser.find_element(By.CSS_SELECTOR, "#chain a.evidence")
    record_id = link.text
    link.click()
    assert browser.current_url.endswith(f"/evidence/{record_id}")
    assert browser.find_element(By.ID, "evidence").is_displayed()


def test_the_timeline_of_a_maintenance_storm_has_a_lane_per_rank(
    browser: webdriver.Chrome, site: str, world: World, tmp_path: Path
) -> None:
    namespace, name = world.c
    document = world.service.explanation_json(_OPS, namespace, name)
    attempts = orjson.loads(document)["attempts"]
    # The storm's ranks: each relaunch recreated every rank's pod under a new generated name.
    ranks = {a["rank"] or a["pod"].rsplit("-", 1)[0] for a in attempts}
    assert len(attempts) >= 20 and len(ranks) < len(attempts) / 3
    _login(browser, site, "ops", f"/experiments/{namespace}/{name}")
    assert (
        browser.find_element(By.ID, "verdict").get_attribute("data-category") == "node.maintenance"
    )
    assert browser.find_element(By.ID, "owner").text == "owner: infra"
    rank_lanes = browser.find_elements(By.CSS_SELECTOR, "g.lane[data-lane^='rank:']")
    assert len(rank_lanes) == len(ranks)
    for lane in rank_lanes:
        # Its successive runs, numbered along it, with a gap where one ended and the next began.
        bars = sorted(
            lane.find_elements(By.CSS_SELECTOR, "rect.bar"), key=lambda b: _number(b, "data-a")
        )
        assert [b.get_attribute("data-try") for b in bars] == [
            str(n) for n in range(1, len(bars) + 1)
        ]
        assert len(bars) >= 4
        for before, after in itertools.pairwise(bars):
            assert _number(before, "x") + _number(before, "width") < _number(after, "x")
    # Lane labels differ from one another, the full name in the title.
    labels = browser.find_elements(By.CSS_SELECTOR, ".lane-label")
    assert len({e.text for e in labels}) == len(labels)
    assert all(
        e.get_attribute("title").startswith(e.text.rstrip("…").split("…")[0]) for e in labels
    )
    # Maintenance windows are shaded on the nodes' lanes.
    windows = browser.find_elements(By.CSS_SELECTOR, "g.lane[data-lane^='node:'] rect.window")
    assert windows, "maintenance windows are shaded"
    categories = {
        b.get_attribute("data-category") for b in browser.find_elements(By.CSS_SELECTOR, "rect.bar")
    }
    assert "node.maintenance" in categories
    # Marks are coloured by cause and shaped by kind, not all one red dot.
    marks = browser.find_elements(By.CSS_SELECTOR, "g.lane use")
    assert len({m.get_attribute("fill") for m in marks}) >= 3
    assert len({m.get_attribute("href").split("-")[0] for m in marks}) >= 3
    # The opening view is framed on the failures: from the first to the last, not the hours
    # of training before them; "all" shows everything, windows included.
    v0, v1 = _view(browser)
    plot = browser.find_element(By.ID, "plot")
    end = _number(plot, "data-end")
    failed = [
        b
        for b in browser.find_elements(By.CSS_SELECTOR, "rect.bar")
        if b.get_attribute("data-category") != "running"
    ]
    assert v0 > 0 and all(v0 <= _number(b, "data-b") <= v1 for b in failed)
    assert all(_number(w, "data-a") >= 0 and _number(w, "data-b") <= end for w in windows)
    _shoot(browser, "timeline-maintenance-storm.png", tmp_path)


def test_the_page_of_a_twenty_run_storm_is_small(world: World) -> None:
    from fastapi.testclient import TestClient

    namespace, name = world.c
    attempts = orjson.loads(world.service.explanation_json(_OPS, namespace, name))["attempts"]
    assert len(attempts) >= 20
    app = create_app(world.service, ApiOptions(access_for(world)))
    with TestClient(app) as client:
        page = client.get(
            f"/experiments/{namespace}/{name}", headers={"Authorization": f"Bearer {TOKENS['ops']}"}
        )
    assert page.status_code == 200 and page.text.count('class="bar"') == len(attempts)
    assert len(page.content) < 200_000, f"{len(page.content)} bytes"


def test_a_team_cannot_open_another_teams_timeline(
    browser: webdriver.Chrome, site: str, world: World
) -> None:
    namespace, name = world.b
    _login(browser, site, "team-a", f"/experiments/{namespace}/{name}")
    assert "no experiment" in browser.page_source and not browser.find_elements(By.ID, "plot")


def test_the_fleet_page_charts_the_loss_and_ranks_the_xid_node_first(
    browser: webdriver.Chrome, site: str, world: World, tmp_path: Path
) -> None:
    _login(browser, site, "ops", "/nodes?since=365d")
    segments = browser.find_elements(By.CSS_SELECTOR, "svg#loss rect.segment")
    assert segments and all(float(s.get_attribute("height") or 0) > 0 for s in segments)
    assert {s.get_attribute("data-cause") for s in segments} >= {"gpu", "node", "app"}
    first = browser.find_element(By.CSS_SELECTOR, "#nodes tbody tr")
    assert first.get_attribute("data-hardware") != "0"
    node = first.get_attribute("data-node")
    _shoot(browser, "fleet.png", tmp_path)
    first.find_element(By.TAG_NAME, "a").click()
    assert browser.find_element(By.ID, "node").get_attribute("data-node") == node
    kinds = {
        r.get_attribute("data-what")
        for r in browser.find_elements(By.CSS_SELECTOR, "#history tbody tr")
    }
    assert {"fault", "run"} <= kinds
    _shoot(browser, "node.png", tmp_path)
    # A team sees its own runs only; the others' are a count.
    _login(browser, site, "team-a", "/nodes?since=365d")
    window = browser.find_element(By.ID, "window").text
    assert "in namespaces you cannot read" in window and world.b[1] not in browser.page_source


def test_a_running_job_with_maintenance_ahead_is_at_risk_on_its_page(
    browser: webdriver.Chrome, tmp_path: Path, world: World
) -> None:
    from tests.api.test_maintenance_ahead import _running
    from whyjob.api.service import Service
    from whyjob.core.index import SqliteIndex
    from whyjob.explain.ruleset import load_rules

    now = int(time.time()) * 1000
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        _running(index, "gpu-node-1", now)
        index.write(
            [Evidence(evidence_id("aws.ec2", "i-1", "ahead"), now + 40 * 60_000, "aws.ec2",
                      "maintenance.scheduled", "EC2 system-reboot scheduled for i-1",
                      ts_end=now + 160 * 60_000, node="gpu-node-1",
                      attrs={"provider": "aws", "code": "system-reboot", "state": "scheduled"}),
             # An Azure event with no duration: a window with no end, on the other rank's node.
             Evidence(evidence_id("azure", "vm-2", "freeze"), now - 150 * 60_000, "azure",
                      "maintenance.scheduled", "Azure Freeze Scheduled for vm-2 (node gpu-node-1-peer)",
                      node="gpu-node-1-peer", instance_id="vm-2",
                      attrs={"provider": "azure", "type": "Freeze", "state": "Scheduled"})]
        )  # fmt: skip
    service = Service(tmp_path / "index.sqlite", load_rules())
    app = create_app(service, ApiOptions(access_for(world), login_links=True))
    with _serving(app) as url:
        _login(browser, url, "ops", "/experiments/ml/llama-ft")
        (item,) = browser.find_elements(By.CSS_SELECTOR, "#at-risk li")
        assert item.get_attribute("data-node") == "gpu-node-1"
        assert re.search(r"scheduled maintenance, in (?:39m|40m)", item.text), item.text
        assert "running worker-0" in item.text
        (window,) = browser.find_elements(By.CSS_SELECTOR, "rect.window.at-risk")
        assert float(window.get_attribute("width") or 0) > 2
        # The window with no end is shaded from its start to the edge of the view, fading out
        # there, at every zoom; "all" reaches back to its start.
        (lane,) = browser.find_elements(By.CSS_SELECTOR, "g.lane[data-lane='node:gpu-node-1-peer']")
        (open_,) = lane.find_elements(By.CSS_SELECTOR, "rect.window.open")
        assert open_.get_attribute("fill") == "url(#fade-node)"
        plot = browser.find_element(By.ID, "plot")
        for button in ("zoom-reset", "zoom-in", "zoom-in", "zoom-out", "zoom-focus"):
            browser.find_element(By.ID, button).click()
            right = _number(open_, "x") + _number(open_, "width")
            assert right == pytest.approx(
                float(plot.get_dom_attribute("viewBox").split()[2]), abs=0.5
            )
        browser.find_element(By.ID, "zoom-reset").click()
        assert _view(browser)[0] <= _number(open_, "data-a") and _number(open_, "x") >= 0
        _shoot(browser, "timeline-at-risk.png", tmp_path)
