"""A deck at a glance: every slide of an exported deck as a thumbnail, on one contact sheet (a PNG).

An instructor preparing a lecture wants to see a whole deck before projecting it: where a figure landed,
which slides are dense, where a table was split. Headless Chromium (the one `slides --pdf` uses, no network)
opens the deck at the projector's 1280×720, shows each slide with all its fragments, lets MathJax, plotly and
the deck's own fitter finish, and takes a screenshot; the browser then composes the screenshots into one
image, four to a row, each numbered as the deck numbers it. Instructors run it as ``adapterlab slides
--contact-sheet``; the browser tests compose their contact sheets with the same code.
"""

from __future__ import annotations

import base64
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .slides_pdf import find_chromium, opened_deck

THUMB_WIDTH, COLUMNS = 320, 4

#: Show slide (h, v) as a lecture shows it once every fragment is in, and wait until it is drawn.
SHOW = """async ([h, v]) => {
    Reveal.slide(h, v);
    while (Reveal.nextFragment()) {}
    await new Promise(done => window.MathJax ? MathJax.Hub.Queue(done) : done());
    if (window.Plotly) {
        await Promise.all([...Reveal.getCurrentSlide().querySelectorAll('.plotly-graph-div')].map(div => Plotly.Plots.resize(div)));
    }
    if (window.refreshSlide) await refreshSlide({currentSlide: Reveal.getCurrentSlide()});  // the deck's own fitting
    await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
}"""

#: Compose screenshots (base64 PNGs) into one sheet under a title; returns the sheet as a base64 PNG.
CONTACT_SHEET = """async ([shots, width, columns, title]) => {
    const images = await Promise.all(shots.map(src => new Promise(done => {
        const image = new Image(); image.onload = () => done(image); image.src = 'data:image/png;base64,' + src;
    })));
    const height = Math.round(width * images[0].height / images[0].width);
    const canvas = document.createElement('canvas');
    canvas.width = columns * (width + 8) + 8;
    canvas.height = 40 + Math.ceil(images.length / columns) * (height + 30);
    const context = canvas.getContext('2d');
    context.fillStyle = '#ddd'; context.fillRect(0, 0, canvas.width, canvas.height);
    context.fillStyle = '#000'; context.font = '18px sans-serif'; context.fillText(title, 8, 26);
    images.forEach((image, i) => {
        const x = 8 + (i % columns) * (width + 8), y = 40 + Math.floor(i / columns) * (height + 30);
        context.font = '14px sans-serif'; context.fillText(`slide ${i + 1}`, x, y + 14);
        context.drawImage(image, x, y + 20, width, height);
    });
    return canvas.toDataURL('image/png').split(',')[1];
}"""


def compose_contact_sheet(browser, shots: list[str], title: str) -> bytes:
    """One PNG of `shots` (base64 screenshots, in slide order) under `title`, composed in a page of `browser`."""
    sheet = browser.new_page()
    try:
        return base64.b64decode(sheet.evaluate(CONTACT_SHEET, [shots, THUMB_WIDTH, COLUMNS, title]))
    finally:
        sheet.close()


def slide_screenshots(page) -> list[str]:
    """Every slide of the deck open in `page`, shown whole (:data:`SHOW`), as base64 PNG screenshots."""
    page.evaluate("Reveal.configure({transition: 'none', backgroundTransition: 'none'})")
    page.add_style_tag(content=".reveal .fragment { transition: none !important; }")
    indices = page.evaluate("Reveal.getSlides().map(slide => Reveal.getIndices(slide)).map(i => [i.h, i.v || 0])")
    shots = []
    for h, v in indices:
        page.evaluate(SHOW, [h, v])
        shots.append(base64.b64encode(page.screenshot()).decode())
    return shots


def deck_contact_sheet(deck: Path | str, chromium: str | None = None) -> Path:
    """Write `<lab>.contact.png` beside `deck` (an exported .slides.html): every slide at 1280×720, as a
    thumbnail; return its path. Runs in a thread of its own, as :func:`.slides_pdf.deck_to_pdf` does."""
    deck = Path(deck).resolve()
    chromium = chromium or find_chromium()
    with ThreadPoolExecutor(max_workers=1) as worker:
        return worker.submit(_sheet, deck, chromium).result()


def _sheet(deck: Path, chromium: str) -> Path:
    sheet = deck.with_name(deck.name.removesuffix(".slides.html") + ".contact.png")
    with opened_deck(deck, chromium, doing="draw") as (browser, page):
        shots = slide_screenshots(page)
        title = f"{deck.name.removesuffix('.slides.html')}: {len(shots)} slides at 1280x720"
        sheet.write_bytes(compose_contact_sheet(browser, shots, title))
    return sheet
