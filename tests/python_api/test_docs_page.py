# SPDX-License-Identifier: Apache-2.0
"""The /docs page in a real browser: Debian's headless Chromium driven by Playwright,
against live Rust and Python servers on loopback.

Every request the page makes is recorded, and any to an address off loopback is
refused and fails the test. Screenshots go to target/test-output/.
"""

from __future__ import annotations

import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlsplit

import pytest
from conftest import REPO_ROOT, described_rust_server

sys.path.insert(0, str(REPO_ROOT / "examples" / "python"))
import described_server  # noqa: E402

from playwright.sync_api import Page, Route, sync_playwright  # noqa: E402

OUTPUT = REPO_ROOT / "target" / "test-output"
LOOPBACK = {"127.0.0.1", "localhost", "[::1]", "::1"}


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    assert Path(path).exists(), "Debian's chromium is missing: scripts/setup.sh installs it"
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=chromium(), args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


class Recorder:
    """Every URL the page asks for; those off loopback are refused."""

    def __init__(self) -> None:
        self.urls: list[str] = []
        self.refused: list[str] = []

    def __call__(self, route: Route) -> None:
        url = route.request.url
        self.urls.append(url)
        host = urlsplit(url).hostname or ""
        if urlsplit(url).scheme in ("http", "https", "ws", "wss") and host not in LOOPBACK:
            self.refused.append(url)
            route.abort()
        elif urlsplit(url).scheme not in ("http", "https", "data"):
            self.refused.append(url)
            route.abort()
        else:
            route.continue_()


@pytest.fixture
def page(browser: Any) -> Iterator[tuple[Page, Recorder, list[str]]]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    recorder = Recorder()
    context.route("**/*", recorder)
    errors: list[str] = []
    page = context.new_page()
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    try:
        yield page, recorder, errors
    finally:
        context.close()


def rust_server() -> Iterator[int]:
    with described_rust_server("poll") as port:
        yield port


def python_server() -> Iterator[int]:
    server = described_server.make_server(port=0, engine="poll")
    with server:
        yield server.port


SERVERS = {
    "rust": (rust_server, ["divide", "greet", "scale", "sum", "uptime"]),
    "python": (python_server, ["checksum", "clamp", "divide", "greet", "pick", "scale", "sum"]),
}


@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_docs_page_lists_and_calls_the_methods(kind: str, page: tuple[Page, Recorder, list[str]]) -> None:
    start, methods = SERVERS[kind]
    tab, recorder, errors = page
    for port in start():
        base = f"http://127.0.0.1:{port}"
        tab.goto(f"{base}/docs")
        listed = tab.locator("section[data-method]").evaluate_all("nodes => nodes.map(n => n.dataset.method)")
        assert listed == methods

        # A call through the form shows its result.
        sum_section = tab.locator('section[data-method="sum"]')
        sum_section.locator('[data-param="a"]').fill("20")
        sum_section.locator('[data-param="b"]').fill("22")
        sum_section.locator('[data-action="send"]').click()
        result = sum_section.locator("[data-result]")
        result.locator("pre").wait_for()
        assert '"result": 42' in result.inner_text()
        assert "ok" in (result.get_attribute("class") or "")

        # An invalid call, as raw JSON, shows the server's error.
        sum_section.get_by_role("button", name="JSON").click()
        sum_section.locator("[data-raw-params]").fill('{"a": "twenty"}')
        sum_section.locator('[data-action="send"]').click()
        tab.wait_for_function(
            "section => section.querySelector('[data-result]').classList.contains('error')",
            arg=sum_section.element_handle(),
        )
        assert "-32602" in result.inner_text()

        # Search narrows the list.
        tab.locator("#search").fill("scale")
        visible = tab.locator("section[data-method]:not(.hidden)").evaluate_all("ns => ns.map(n => n.dataset.method)")
        assert visible == ["scale"]
        tab.locator("#search").fill("")

        # A batch of two calls, each prefilled from its method's first example.
        tab.locator('[data-action="add-call"]').click()
        tab.locator("[data-batch-call]").last.locator("select").select_option("sum")
        tab.locator('[data-action="send-batch"]').click()
        batch = tab.locator("[data-batch-result]")
        batch.locator("pre").wait_for()
        replies = json.loads(batch.locator("pre").inner_text())
        assert [r["id"] for r in replies] == [r["id"] for r in replies if "result" in r] and len(replies) == 2
        assert replies[1]["result"] == 3

        # Headers are sent with calls and kept across a reload.
        tab.locator('[data-action="add-header"]').click()
        row = tab.locator("#header-rows .row").last
        row.locator("input").nth(0).fill("X-Trace")
        row.locator("input").nth(1).fill("docs-test")
        with tab.expect_request(lambda r: r.method == "POST") as sent:
            sum_section.locator('[data-action="send"]').click()
        assert sent.value.headers.get("x-trace") == "docs-test"
        tab.reload()
        names = tab.locator("#header-rows input").evaluate_all("inputs => inputs.map(i => i.value)")
        assert names == ["X-Trace", "docs-test"]

        # The snippets name this server and the call.
        snippet = tab.locator('section[data-method="sum"] [data-snippet]').text_content() or ""
        assert f"curl -s '{base}/'" in snippet and '"method":"sum"' in snippet

        OUTPUT.mkdir(parents=True, exist_ok=True)
        tab.locator('section[data-method="scale"] [data-action="send"]').click()
        tab.locator('section[data-method="scale"] [data-result] pre').wait_for()
        tab.screenshot(path=str(OUTPUT / f"docs-{kind}.png"), full_page=True)

    assert recorder.refused == [], "requests left loopback"
    assert recorder.urls, "the recorder saw no request"
    assert all(urlsplit(u).hostname == "127.0.0.1" for u in recorder.urls), recorder.urls
    assert errors == [], errors


@pytest.mark.parametrize("kind", sorted(SERVERS))
def test_the_form_names_empty_required_fields_before_sending(kind: str, page: tuple[Page, Recorder, list[str]]) -> None:
    start, _ = SERVERS[kind]
    tab, recorder, errors = page
    for port in start():
        tab.goto(f"http://127.0.0.1:{port}/docs")
        sum_section = tab.locator('section[data-method="sum"]')
        sum_section.locator('[data-param="a"]').fill("")
        sum_section.locator('[data-param="b"]').fill("2")
        posts_before = len([u for u in recorder.urls if u.rstrip("/").endswith(str(port))])
        sum_section.locator('[data-action="send"]').click()
        result = sum_section.locator("[data-result]")
        result.locator("pre").wait_for()
        assert "Required, and empty: a." in result.inner_text()
        assert "error" in (result.get_attribute("class") or "")
        assert len([u for u in recorder.urls if u.rstrip("/").endswith(str(port))]) == posts_before  # nothing sent
        sum_section.locator('[data-param="a"]').fill("1")
        sum_section.locator('[data-action="send"]').click()
        tab.wait_for_function("s => s.querySelector('[data-result]').innerText.includes('\"result\": 3')", arg=sum_section.element_handle())
    assert errors == [], errors


def test_the_form_sends_a_file_as_an_attachment(page: tuple[Page, Recorder, list[str]], make_server: Any) -> None:
    """A param the document marks x-ucall-attachment takes a file: sent in a binary message
    (docs/wire.md), a .npy file as the array it holds."""
    np = pytest.importorskip("numpy")
    tab, recorder, errors = page
    kinds: list[str | None] = []
    tab.on("request", lambda request: kinds.append(request.headers.get("content-type")) if request.method == "POST" else None)
    server = make_server()

    @server
    def checksum(data: bytes) -> int:
        return sum(data) % 256

    @server
    def total(x: np.ndarray) -> list[Any]:
        return [x.dtype.name, list(x.shape), float(x.sum())]

    server.start()
    tab.goto(f"http://127.0.0.1:{server.port}/docs")
    section = tab.locator('section[data-method="checksum"]')
    blob = {"name": "blob.bin", "mimeType": "application/octet-stream", "buffer": bytes(range(1, 101))}
    section.locator('[data-attachment="data"]').set_input_files(files=[blob])  # type: ignore[list-item]
    section.locator('[data-action="send"]').click()
    result = section.locator("[data-result]")
    result.locator("pre").wait_for()
    assert '"result": 186' in result.inner_text()  # 5050 % 256

    npy = io.BytesIO()
    np.save(npy, np.arange(6, dtype=np.float32).reshape(2, 3))
    section = tab.locator('section[data-method="total"]')
    array = {"name": "x.npy", "mimeType": "application/octet-stream", "buffer": npy.getvalue()}
    section.locator('[data-attachment="x"]').set_input_files(files=[array])  # type: ignore[list-item]
    section.locator('[data-action="send"]').click()
    result = section.locator("[data-result]")
    result.locator("pre").wait_for()
    assert json.loads(result.locator("pre").inner_text())["result"] == ["float32", [2, 3], 15.0]
    assert kinds == ["application/vnd.ucall.binary"] * 2
    assert errors == [], errors
