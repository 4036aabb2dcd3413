"""Every lab's deck, opened from disk in headless Chromium with the network blocked.

A deck passes when reveal.js initialises, shows as many slides as the notebook's slide metadata
asks for (as the lecture layout leaves it, plus the title slide), draws its plotly figures (an
svg.main-svg per figure), numbers its slides (shown / total, for a lecturer to point at), shows no
broken widget, and makes no request that leaves the machine or
fails. The decks are exported into build/slides, the instructor's folder, so this test also leaves
the exported slides behind.
"""

from __future__ import annotations

import pytest

from adapterlab.labfiles import all_labs
from adapterlab.slide_layout import LectureLayout
from adapterlab.slides import PLOTLY_MIME

# MathJax 2 probes web-font support with a font at about:blank; that request never leaves the page.
LOCAL_PROBES = ("about:",)


def expected_slides(nb) -> int:
    """Slides reveal.js counts (every subslide): the title slide and the slide on where the numbers come
    from, then, from the metadata of the cells
    as the lecture layout leaves them, a slide at the first visible cell and at each cell marked slide
    or subslide."""
    nb, _ = LectureLayout().preprocess(nb, {})
    kinds = [cell.metadata.get("slideshow", {}).get("slide_type", "-") for cell in nb.cells]
    first = next(i for i, kind in enumerate(kinds) if kind not in ("skip", "notes"))
    return 3 + sum(kind in ("slide", "subslide") for kind in kinds[first + 1 :])


def figure_count(nb) -> int:
    return sum(PLOTLY_MIME in output.get("data", {}) for cell in nb.cells if cell.cell_type == "code" for output in cell.outputs)


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_deck_opens_offline(lab, page, decks, deck_notebooks, screenshots):
    nb = deck_notebooks[lab.stem]
    blocked, failed, errors = [], [], []

    def only_files(route):
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    page.route("**/*", only_files)
    page.on("requestfailed", lambda request: failed.append(f"{request.url} ({request.failure})"))
    page.on("pageerror", lambda error: errors.append(str(error)))

    page.goto(decks[lab.stem].as_uri())
    page.wait_for_function("() => window.Reveal && Reveal.isReady()", timeout=30_000)
    assert page.evaluate("Reveal.getTotalSlides()") == expected_slides(nb)

    figures = figure_count(nb)
    if figures:
        page.wait_for_function(f"() => document.querySelectorAll('svg.main-svg').length >= {figures}", timeout=30_000)
        # show the first figure's slide in the screenshot
        page.evaluate("(() => { const i = Reveal.getIndices(document.querySelector('.js-plotly-plot').closest('section')); Reveal.slide(i.h, i.v); })()")
    page.evaluate("() => new Promise(done => window.MathJax ? MathJax.Hub.Queue(done) : done())")
    page.wait_for_timeout(500)  # the slide transition
    page.screenshot(path=screenshots / f"slides-{lab.stem}.png")
    number = page.evaluate("""() => { const n = document.querySelector('.reveal .slide-number');
        return n && n.offsetParent ? n.innerText.replace(/\\s+/g, '') : null; }""")
    shown = page.evaluate("Reveal.getSlidePastCount() + 1")
    assert number == f"{shown}/{expected_slides(nb)}", f"the slide number reads {number!r}"

    assert "Error displaying widget" not in page.inner_text("body")
    assert blocked == [], f"the deck asked the network for {blocked}"
    assert [f for f in failed if not f.startswith(LOCAL_PROBES)] == []
    assert errors == [], f"JavaScript errors: {errors}"
