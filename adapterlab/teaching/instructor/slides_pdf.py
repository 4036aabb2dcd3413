"""Print a slide deck to PDF, one page per slide, with headless Chromium and no network.

An instructor who cannot run a browser deck in the lecture hall (a locked-down room PC, a
handout) needs a PDF. reveal.js lays a deck out for printing when its URL asks for
``?print-pdf``; Playwright drives the Chromium installed here (no browser download) to open that
view, waits until reveal.js, MathJax and the deck's fitter say they are done, checks that there is
one page per slide, and prints. Waiting for those signals, not for a fixed time, is what makes the
PDF the same on a busy machine as on a quiet one. Instructors run it as ``adapterlab slides --pdf``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
TIMEOUT_MS = 300_000  # for the deck to load, typeset and lay out its print view
VIEWPORT = {"width": 1280, "height": 720}  # the deck's own size: the print view lays out a page per slide at it
ARGS = ["--disable-gpu", "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync"]
#: In the print view: wait for MathJax's queue and the deck's fitter, then for two frames; count the pages.
LAID_OUT = """async () => {
    await new Promise(done => window.MathJax && MathJax.Hub ? MathJax.Hub.Queue(done) : done());
    if (window.fitAll) await fitAll();
    await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
    return document.querySelectorAll('.pdf-page').length;
}"""
_PAGE = re.compile(rb"/Type\s*/Page(?![a-zA-Z])")
_SECTION = re.compile(r"<section\b|</section>")


class PdfError(RuntimeError):
    """A deck cannot be printed: no Chromium, or Chromium failed. The message says what to do."""


def find_chromium() -> str:
    """The Chromium or Chrome executable: $ADAPTERLAB_CHROMIUM, else the first of BROWSERS on the PATH."""
    named = os.environ.get("ADAPTERLAB_CHROMIUM")
    if named:
        if not Path(named).is_file():
            raise PdfError(f"ADAPTERLAB_CHROMIUM={named} is not a file; point it at a Chromium or Chrome executable")
        return named
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    raise PdfError("PDF slides need Chromium or Google Chrome; install one (Debian: apt-get install chromium) "
                   "or set ADAPTERLAB_CHROMIUM to its executable")


def slide_count(deck_html: str) -> int:
    """Slides of a deck (reveal.js's vertical slides, the sections nested in a top-level section)."""
    depth = count = 0
    for tag in _SECTION.findall(deck_html):
        depth += 1 if tag == "<section" else -1
        count += tag == "<section" and depth == 2
    return count


def page_count(pdf: Path | str) -> int:
    """Pages of a PDF written by Chromium (its page objects are not compressed)."""
    return len(_PAGE.findall(Path(pdf).read_bytes()))


def deck_to_pdf(deck: Path | str, chromium: str | None = None) -> Path:
    """Print `deck` (an exported .slides.html) to the .pdf beside it, one page per slide; return the PDF's path.

    The printing runs in a thread of its own: Playwright's synchronous API refuses a thread whose asyncio
    loop is running, as a Jupyter kernel's is.
    """
    deck = Path(deck).resolve()
    chromium = chromium or find_chromium()
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(_print, deck, chromium).result()


@contextlib.contextmanager
def opened_deck(deck: Path, chromium: str, view: str = "", doing: str = "print"):
    """(browser, page) with `deck` open at the deck's own size and reveal.js ready, in headless Chromium with no
    network; closed on leaving. `view` is the URL's query (``?print-pdf``). A Playwright that is missing or
    a Chromium that fails raise :class:`PdfError`, which says what to do; `doing` names the job in it."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        raise PdfError(f"to {doing} a deck needs the playwright package (pip install playwright); it drives the "
                       "Chromium installed here, no browser download") from None
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
            try:
                page = browser.new_page(viewport=VIEWPORT)
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(deck.as_uri() + view)
                page.wait_for_function("() => window.Reveal && Reveal.isReady()")
                yield browser, page
            finally:
                browser.close()
    except Error as error:
        reason = (str(error).strip().splitlines() or ["no message"])[0]
        raise PdfError(f"Chromium could not {doing} {deck.name} ({reason}); try again, or open the deck in "
                       "Chromium and do it from there") from None


def _print(deck: Path, chromium: str) -> Path:
    pdf = deck.with_name(deck.name.removesuffix(".slides.html") + ".pdf")
    slides = slide_count(deck.read_text(encoding="utf-8"))
    with opened_deck(deck, chromium, "?print-pdf") as (_, page):
        pages = page.evaluate(LAID_OUT)
        if pages != slides:
            raise PdfError(f"the print view of {deck.name} has {pages} pages for its {slides} slides; "
                           "open the deck with ?print-pdf in Chromium and print it from there")
        pdf.unlink(missing_ok=True)
        page.pdf(path=str(pdf), prefer_css_page_size=True, print_background=True)
    return pdf
