"""Print a slide deck to PDF, one page per slide, with headless Chromium and no network.

An instructor who cannot run a browser deck in the lecture hall (a locked-down room PC, a
handout) needs a PDF. reveal.js lays a deck out for printing when its URL asks for
``?print-pdf``; Chromium's ``--print-to-pdf`` prints that view from the deck file, after giving
MathJax and plotly.js time to draw. Instructors run it as ``adapterlab slides --pdf``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
DRAW_BUDGET_MS = 30_000  # virtual time for reveal.js, MathJax and plotly.js to finish before printing
TIMEOUT_S = 300
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

    Chromium sometimes prints before reveal.js has laid out the print view (one blank page): a PDF
    whose page count is not the deck's slide count is printed once more with twice the time.
    """
    deck = Path(deck).resolve()
    pdf = deck.with_name(deck.name.removesuffix(".slides.html") + ".pdf")
    slides = slide_count(deck.read_text(encoding="utf-8"))
    chromium = chromium or find_chromium()
    for budget in (DRAW_BUDGET_MS, 2 * DRAW_BUDGET_MS):
        _print(chromium, deck, pdf, budget)
        if page_count(pdf) == slides:
            return pdf
    raise PdfError(f"Chromium printed {deck.name} on {page_count(pdf)} pages instead of {slides}; "
                   "open the deck with ?print-pdf in Chromium and print it from there")


def _print(chromium: str, deck: Path, pdf: Path, budget_ms: int) -> None:
    command = [
        chromium, "--headless", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--no-pdf-header-footer", "--run-all-compositor-stages-before-draw",
        f"--virtual-time-budget={budget_ms}", f"--print-to-pdf={pdf}", deck.as_uri() + "?print-pdf",
    ]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        command.insert(2, "--no-sandbox")  # Chromium refuses to run as root with its sandbox
    pdf.unlink(missing_ok=True)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PdfError(f"Chromium did not print {deck.name} within {TIMEOUT_S} s; try again on a less busy machine") from None
    if not pdf.is_file():
        last = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise PdfError(f"Chromium could not print {deck.name} (exit {result.returncode}: {last})")
