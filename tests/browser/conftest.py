"""Headless Chromium for the browser tests, or a skip that says what is missing.

The tests drive Debian's Chromium (/usr/bin/chromium) through the Playwright Python package; a
browser download by Playwright itself is neither needed nor possible offline. Where either is
missing (a student's laptop) every browser test is skipped with the reason, never failed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build" / "screenshots"


def _missing() -> str | None:
    if not CHROMIUM.exists():
        return f"Chromium is not installed at {CHROMIUM} (Debian: apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install playwright; no browser download needed)"
    return None


class Chromium:
    """The session's one headless Chromium, each launch with a fresh profile (user data dir), launched again
    when it has gone: a browser that died under one test would otherwise leave every later one waiting on it."""

    def __init__(self, playwright, tmp_path_factory):
        self.playwright, self.tmp_path_factory, self.current, self.closed = playwright, tmp_path_factory, None, True

    def context(self):
        if self.closed:
            self.current = self.playwright.chromium.launch_persistent_context(
                self.tmp_path_factory.mktemp("chromium-profile"),
                executable_path=str(CHROMIUM),
                headless=True,
                args=CHROMIUM_ARGS,
                viewport={"width": 1280, "height": 800},
            )
            self.closed = False
            self.current.on("close", lambda _: setattr(self, "closed", True))
        return self.current

    def new_page(self):
        """A new page; where the browser has died (noticed or not yet), a new browser's."""
        from playwright.sync_api import Error

        try:
            return self.context().new_page()
        except Error:
            self.closed = True
            return self.context().new_page()


@pytest.fixture(scope="session")
def chromium(tmp_path_factory):
    reason = _missing()
    if reason:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        running = Chromium(playwright, tmp_path_factory)
        yield running
        if not running.closed:
            running.current.close()


@pytest.fixture
def browser(chromium):
    """The browser context to open pages in."""
    return chromium.context()


@pytest.fixture(scope="session")
def chromium_executable() -> str:
    """The Chromium executable, for tests that run it without Playwright (PDF printing)."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    return str(CHROMIUM)


@pytest.fixture
def page(chromium):
    page = chromium.new_page()
    yield page
    page.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS


SLIDES = REPO / "build" / "slides"


@pytest.fixture(scope="session")
def exported(testrun_uid):
    """Every lab's deck, exported once a test run into build/slides (the instructor's folder), and each notebook
    as read when its deck was made: ({lab stem: deck}, {lab stem: notebook}). The test files that read the decks
    may run on both pytest-xdist workers: the first to get here exports under a lock and stamps the folder with
    the run's id; the other waits for it and reads the same decks."""
    import nbformat
    from adapterlab.labfiles import all_labs
    from adapterlab.slides import export_slides
    from filelock import FileLock

    SLIDES.mkdir(parents=True, exist_ok=True)
    stamp = SLIDES / ".exported-by-test-run"
    with FileLock(str(SLIDES / ".export.lock")):
        notebooks = {lab.stem: nbformat.read(lab, as_version=4) for lab in all_labs()}
        if stamp.exists() and stamp.read_text() == testrun_uid:
            decks = {lab.stem: SLIDES / f"{lab.stem}.slides.html" for lab in all_labs()}
        else:
            decks = {deck.name.removesuffix(".slides.html"): deck for deck in export_slides(None, SLIDES)}
            stamp.write_text(testrun_uid)
    return decks, notebooks


@pytest.fixture(scope="session")
def decks(exported):
    return exported[0]


@pytest.fixture(scope="session")
def deck_notebooks(exported):
    return exported[1]


@pytest.fixture
def offline_page(page) -> dict:
    """The page, allowed to load only files: {"page", and the lists "blocked", "failed" (requests) and "errors"}."""
    seen = {"blocked": [], "failed": [], "errors": []}

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            seen["blocked"].append(route.request.url)
            route.abort()

    page.route("**/*", only_files)
    page.on("requestfailed", lambda request: seen["failed"].append(f"{request.url} ({request.failure})"))
    page.on("pageerror", lambda error: seen["errors"].append(str(error)))
    return seen | {"page": page}
