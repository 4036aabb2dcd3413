"""Export the labs to reveal.js slide decks that open offline.

Instructors teach in rooms with poor or no internet, so a deck must not fetch anything:
nbconvert's slides exporter loads reveal.js, require.js, MathJax and the widget manager from a
CDN, and the notebooks store plotly figures as JSON that needs plotly.js. Here every script is
a file copied from an installed package into `<out_dir>/lib/` (reveal.js from sphinx-revealjs,
MathJax 2 from jupyter-server-mathjax, plotly.js from plotly), plotly figures become a div
drawn by the one plotly.js of the deck, and widget views (which need a kernel) are dropped: the
labs put a static snapshot figure right after each widget cell.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
from pathlib import Path

import nbformat
import plotly.io
from nbconvert.exporters import SlidesExporter
from nbconvert.preprocessors import Preprocessor

from .labfiles import find_labs

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_VIEW_MIME = "application/vnd.jupyter.widget-view+json"

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "offline_reveal"

# Where the decks find their scripts, relative to the deck files.
REVEAL_PREFIX = "lib/reveal.js"
MATHJAX_URL = "lib/mathjax/MathJax.js?config=TeX-AMS-MML_HTMLorMML-full,Safe"
PLOTLY_JS = "lib/plotly.min.js"


class OfflineOutputs(Preprocessor):
    """Turn the outputs that need a kernel or a CDN into ones a static, offline deck can show.

    A plotly JSON output becomes a div plus a `Plotly.newPlot` call (plotly.js itself is
    included once by the template); a widget view is dropped. The number of figures goes into
    `resources["plotly_figures"]` so the template includes plotly.js only where needed.
    """

    def preprocess(self, nb, resources):
        figures = 0
        for cell in nb.cells:
            if cell.cell_type != "code":
                continue
            kept = []
            for output in cell.outputs:
                data = output.get("data", {})
                if WIDGET_VIEW_MIME in data:
                    continue
                if PLOTLY_MIME in data:
                    figures += 1
                    figure = data.pop(PLOTLY_MIME)
                    data["text/html"] = plotly.io.to_html(
                        figure,
                        config=figure.get("config"),
                        include_plotlyjs=False,
                        full_html=False,
                        validate=False,
                        div_id=f"figure-{figures}",
                    )
                kept.append(output)
            cell.outputs = kept
        nb.metadata.pop("widgets", None)
        resources["plotly_figures"] = figures
        return nb, resources


def _package_dir(name: str, install_hint: str) -> Path:
    """The folder of an installed package, found without importing it (sphinx-revealjs imports Sphinx)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"the package {name!r} is needed for offline slides: {install_hint}")
    return Path(next(iter(spec.submodule_search_locations)))


def copy_assets(out_dir: Path | str) -> Path:
    """Copy reveal.js, MathJax and plotly.js into `<out_dir>/lib` and return that folder."""
    lib = Path(out_dir) / "lib"
    reveal = _package_dir("sphinx_revealjs", "pip install sphinx-revealjs") / "_static" / "revealjs"
    mathjax = _package_dir("jupyter_server_mathjax", "pip install jupyter-server-mathjax") / "static"
    plotly_js = _package_dir("plotly", "pip install plotly") / "package_data" / "plotly.min.js"
    for folder in ("dist", "plugin/notes"):
        shutil.copytree(reveal / folder, lib / "reveal.js" / folder, dirs_exist_ok=True)
    shutil.copy2(reveal / "LICENSE", lib / "reveal.js" / "LICENSE")
    shutil.copytree(mathjax, lib / "mathjax", dirs_exist_ok=True)
    shutil.copy2(plotly_js, lib / "plotly.min.js")
    return lib


def slides_exporter() -> SlidesExporter:
    """nbconvert's slides exporter with the offline template and the output preprocessor."""
    exporter = SlidesExporter(
        extra_template_basedirs=[str(TEMPLATES_DIR)],
        template_name=TEMPLATE_NAME,
        reveal_url_prefix=REVEAL_PREFIX,
        reveal_theme="white",  # the themes "simple" (nbconvert's default) and others load Google fonts
        reveal_width="1280",  # 16:9, the shape of a projector: a 1280 × 720 screen shows the slide at 0.96
        reveal_height="720",
        reveal_number="c/t",  # every slide numbered (current / total): a lecturer points at "slide 12"
        mathjax_url=MATHJAX_URL,
    )
    exporter.register_preprocessor(OfflineOutputs(), enabled=True)
    return exporter


class SlidesError(ValueError):
    """A deck cannot be made: a notebook that does not read, or an output folder that cannot be written.
    The message names the file or folder and what to do; ``details`` holds a line per file that failed
    (at most SHOWN_FAILURES of them, then how many more)."""

    details: tuple[str, ...] = ()


class OutputFolderError(SlidesError):
    """The output folder cannot be created or written."""


SHOWN_FAILURES = 3  # files a failed copy names one by one; the others are counted
_ERRNO = re.compile(r"^\[Errno \d+\] ([^:]+).*$", re.S)


def _output_error(out_dir: Path, error: OSError) -> OutputFolderError:
    """The one-line error for an OSError met while writing into ``out_dir``. A copy of a folder fails with
    one (source, destination, reason) per file (shutil.Error): those become ``details``, a line each."""
    advice = "pass --out a folder you can write to"
    if isinstance(error, shutil.Error) and error.args and isinstance(error.args[0], list):
        failures = [(str(failure[1]), _ERRNO.sub(r"\1", str(failure[2])).lower()) for failure in error.args[0]]
        shown = [f"cannot write {path} ({why})" for path, why in failures[:SHOWN_FAILURES]]
        more = [f"... and {len(failures) - len(shown)} more"] if len(failures) > len(shown) else []
        reasons = ", ".join(dict.fromkeys(why for _, why in failures))
        made = OutputFolderError(f"cannot write slides to {out_dir}: {len(failures)} "
                                 f"file{'s' if len(failures) != 1 else ''} failed ({reasons}); {advice}")
        made.details = tuple(shown + more)
        return made
    reason = (error.strerror or str(error)).lower()
    return OutputFolderError(f"cannot write slides to {out_dir} ({reason}); {advice}")


def _export_one(exporter: SlidesExporter, notebook: Path) -> str:
    """One deck's HTML; a notebook that is not valid notebook JSON raises :class:`SlidesError` naming it."""
    try:
        body, _ = exporter.from_filename(str(notebook), resources={"plotly_js_url": PLOTLY_JS})
    except (ValueError, KeyError, TypeError, AttributeError, nbformat.ValidationError) as error:
        reason = " ".join(str(error).split())[:200] or type(error).__name__
        raise SlidesError(f"{notebook} is not a notebook that can be read ({reason}); restore it from git or "
                          "open and save it again in Jupyter") from None
    return body


def export_slides(labs: list[str] | None = None, out_dir: Path | str = "build/slides", pdf: bool = False,
                  contact_sheet: bool = False) -> list[Path]:
    """Export the named labs (all when None) to `<out_dir>/<lab>.slides.html`; return the deck paths.
    With ``pdf`` each deck is also printed to `<out_dir>/<lab>.pdf`, and with ``contact_sheet`` every slide of it
    is drawn as a thumbnail in `<out_dir>/<lab>.contact.png` (both by headless Chromium), listed after the decks.

    Every notebook is read before anything is written, so a broken one stops the export with a message
    that names it. Instructors run it as ``adapterlab slides``.
    """
    notebooks = find_labs(labs)
    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)  # a bad --out fails before the slow export
    except OSError as error:
        raise _output_error(out_dir, error) from None
    exporter = slides_exporter()
    bodies = [(notebook, _export_one(exporter, notebook)) for notebook in notebooks]
    decks = []
    try:
        copy_assets(out_dir)
        for notebook, body in bodies:
            deck = out_dir / f"{notebook.stem}.slides.html"
            deck.write_text(body, encoding="utf-8")
            decks.append(deck)
    except FileNotFoundError as error:
        if error.filename is None:  # a package that carries a script is missing: its message says which
            raise
        raise _output_error(out_dir, error) from None
    except OSError as error:
        raise _output_error(out_dir, error) from None
    from .slides_pdf import PdfError, deck_to_pdf
    from .slides_preview import deck_contact_sheet

    try:
        pdfs = [deck_to_pdf(deck) for deck in decks] if pdf else []
        sheets = [deck_contact_sheet(deck) for deck in decks] if contact_sheet else []
    except PdfError as error:
        raise SlidesError(str(error)) from None
    return decks + pdfs + sheets
