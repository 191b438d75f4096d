"""The page at ``/`` in headless Chromium (Debian's ``chromium``, driven by playwright; no browser is downloaded).

A real server on a free loopback port, a tiny random model, a tiny store with a head: the page searches it with
the API key on and off, with a Matryoshka prefix and under a condition, and shows a result text holding HTML as
text. Skipped only where no Chromium executable is installed.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

pytest.importorskip("fastapi")

from live_server import live_server
from subspaces.serve.app import create_app
from subspaces.serve.engine import Engine
from subspaces.serve.settings import ServeSettings

XSS = '<img src=x onerror="window.__xss = 1">'
TEXTS = ["A man plays a guitar.", "The dog runs in the park.", "Small red house.", XSS]
KEY = "k-page-123"


def chromium_executable() -> str | None:
    """``$SUBSPACES_CHROMIUM``, else Debian's ``chromium`` (or another distribution's name for it) on the PATH."""
    candidates = [os.environ.get("SUBSPACES_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"]
    for name in filter(None, candidates):
        found = shutil.which(name)
        if found:
            return found
    return None


pytestmark = pytest.mark.skipif(
    chromium_executable() is None, reason="no chromium executable (apt-get install chromium) for the page test"
)


@pytest.fixture(scope="module")
def settings(tiny_model_dir, tmp_path_factory) -> ServeSettings:
    from subspaces.models.conditional import build_model
    from subspaces.store import Store

    root = tmp_path_factory.mktemp("page")
    build_model(str(tiny_model_dir), head="hypernet", rank=4, seed=0).save(root / "head")
    Store.create(root / "store", str(tiny_model_dir)).add(TEXTS, ids=["guitar", "dog", "house", "html"])
    return ServeSettings(backend="torch", model=str(tiny_model_dir), store=root / "store", head=root / "head")


@pytest.fixture(scope="module")
def engine(settings) -> Engine:
    return Engine(settings)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        # The system's Chromium; playwright's own download is never used (no internet where the tests run).
        launched = p.chromium.launch(executable_path=chromium_executable(), headless=True)
        yield launched
        launched.close()


@contextmanager
def running(settings: ServeSettings, engine: Engine, **options: Any) -> Iterator[str]:
    """A uvicorn server of the app on a free 127.0.0.1 port; yields its URL."""
    import dataclasses

    with live_server(create_app(dataclasses.replace(settings, **options), engine=engine)) as url:
        yield url


@contextmanager
def opened(browser: Any, url: str) -> Iterator[tuple[Any, list[str]]]:
    """A fresh page (its own sessionStorage) at ``url``, and the console errors it logs."""
    context = browser.new_context()
    page = context.new_page()
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/")
    try:
        yield page, errors
    finally:
        context.close()


def search(page: Any, query: str) -> list[dict[str, str]]:
    """Type ``query``, press Enter, wait for the answer; the result rows as the page shows them."""
    before = page.locator("#latency").text_content()
    page.fill("#query", query)
    page.press("#query", "Enter")
    wait_until(lambda: page.locator("#latency").text_content() != before or page.locator("#error").text_content())
    assert page.locator("#error").text_content() == ""
    cells = page.locator("#results tbody tr").evaluate_all(
        "rows => rows.map(r => Array.from(r.cells, c => c.textContent))"
    )
    return [{"id": c[1], "text": c[2], "score": c[3]} for c in cells]


def wait_until(condition: Callable[[], Any], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("the page did not get there in time")
        time.sleep(0.05)


def test_page_searches_with_the_key_and_shows_html_as_text(browser, settings, engine):
    with running(settings, engine, api_key=KEY) as url, opened(browser, url) as (page, errors):
        wait_until(lambda: "API key" in page.locator("#status").text_content())  # /v1/models answered 401
        page.fill("#key", KEY)
        page.press("#key", "Enter")
        wait_until(lambda: "32 dimensions" in page.locator("#status").text_content())
        assert page.evaluate("sessionStorage.getItem('subspaces-api-key')") == KEY

        rows = search(page, XSS)
        assert rows[0] == {"id": "html", "text": XSS, "score": "1.0000"}  # shown as the text it is
        assert page.locator("#results img").count() == 0 and page.evaluate("window.__xss") is None
        assert "ms" in page.locator("#latency").text_content()

        # the Matryoshka slider: a prefix of 8 coordinates (the store's funnel)
        page.locator("#dims").evaluate("(e) => { e.value = '8'; e.dispatchEvent(new Event('input')); }")
        assert page.locator("#dims-out").text_content() == "8 of 32"
        rows = search(page, TEXTS[1])
        assert rows[0]["id"] == "dog" and "at 8 dimensions" in page.locator("#latency").text_content()

        # a condition: the head's similarity, at full size (the slider is off meanwhile)
        page.fill("#condition", "colour")
        assert page.locator("#dims").is_disabled()
        rows = search(page, TEXTS[2])
        assert len(rows) == 4 and "under the condition" in page.locator("#latency").text_content()
    assert not [e for e in errors if "Content Security Policy" in e or "Uncaught" in e], errors


def test_page_searches_without_a_key(browser, settings, engine):
    with running(settings, engine) as url, opened(browser, url) as (page, errors):
        wait_until(lambda: "32 dimensions" in page.locator("#status").text_content())
        rows = search(page, TEXTS[0])
        assert rows[0]["id"] == "guitar" and len(rows) == 4
    assert not [e for e in errors if "Content Security Policy" in e or "Uncaught" in e], errors
