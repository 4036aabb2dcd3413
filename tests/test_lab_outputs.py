"""The committed labs as a student meets them: found by number, no machine's absolute path in any output or saved
widget state, and the stand-in notice at most once per lab."""

from __future__ import annotations

import ast
import contextlib
import io
import json
import re

import nbformat
import pytest

from adapterlab.labfiles import all_labs

#: A path that names where some machine keeps its files: /home/…, /Users/…, /tmp/…, C:\… and the like.
ABSOLUTE_PATH = re.compile(r"(?<![\w.~])(?:/(?:home|Users|root|tmp|work|mnt|opt|var|srv|private)/|[A-Za-z]:\\\\)")


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_no_output_shows_an_absolute_path(lab):
    nb = nbformat.read(lab, as_version=4)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            found = ABSOLUTE_PATH.search(json.dumps(output))
            assert found is None, f"cell {index} prints a path: …{json.dumps(output)[found.start() - 60:found.end() + 40]}…"
    widgets = json.dumps(nb.metadata.get("widgets", {}))
    assert ABSOLUTE_PATH.search(widgets) is None, "the saved widget state holds an absolute path"


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_the_standin_notice_is_shown_at_most_once(lab):
    """A lab's kernel prints the notice box once (backbones.load_backbone); every later cell names the stand-in
    in its one-line backbone description instead."""
    nb = nbformat.read(lab, as_version=4)
    shown = [index for index, cell in enumerate(nb.cells) for output in cell.get("outputs", [])
             if "NOTICE:" in json.dumps(output)]
    assert len(shown) <= 1, f"the stand-in notice is printed by cells {shown}"


def test_the_pattern_finds_the_paths_it_is_for():
    for text in ("from GLUE folder /work/shared/data/glue/SST-2/dev.tsv", "saved to /home/ana/runs", "C:\\\\Users\\\\ana"):
        assert ABSOLUTE_PATH.search(json.dumps(text)), text
    for text in ("the GLUE folder (SST-2/dev.tsv)", "data/toy/SST-2/dev.tsv", "10/tmp_ratio", "a/b"):
        assert ABSOLUTE_PATH.search(json.dumps(text)) is None, text


def test_a_lab_is_found_by_its_number_with_or_without_the_zero():
    from adapterlab.labfiles import LabNotFoundError, find_labs

    labs = all_labs()
    assert find_labs(["8"]) == find_labs(["08"]) == [next(lab for lab in labs if lab.name.startswith("08_"))]
    with pytest.raises(LabNotFoundError, match="not found"):
        find_labs(["42"])


# lab 8 reads each of its two claims as a sentence, under its own question
@pytest.mark.parametrize("lab", [lab for lab in all_labs() if not lab.stem.startswith("08_")], ids=lambda lab: lab.stem)
def test_a_family_of_verdicts_is_shown_as_a_table(lab):
    """Where a lab decides several verdicts together (Holm), it shows them as a verdict table (HTML in the
    notebook and on the slide), never as a wall of sentences; a single verdict a lab reads word by word (one of
    its family's, saying so) may stay a sentence."""
    nb = nbformat.read(lab, as_version=4)
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            text = output.get("text", "") or "".join(output.get("data", {}).get("text/plain", ""))
            sentences = text.count("; Holm over ")
            assert sentences <= 1 or "verdict-table" in "".join(output.get("data", {}).get("text/html", "")), \
                f"cell {index} prints {sentences} verdicts of a family as sentences"


def stored_figures(lab):
    """(cell index, plotly figure) of every figure a lab's outputs store."""
    nb = nbformat.read(lab, as_version=4)
    return [(index, output["data"]["application/vnd.plotly.v1+json"]) for index, cell in enumerate(nb.cells)
            for output in cell.get("outputs", []) if "application/vnd.plotly.v1+json" in output.get("data", {})]


def _colour(trace) -> str | None:
    return next((trace[key]["color"] for key in ("line", "marker")
                 if isinstance(trace.get(key, {}).get("color"), str)), None)


def _worn(trace) -> list[tuple[str, str]]:
    """(what is drawn, its colour) for a trace: its name, or each bar's label where the bars differ in colour."""
    colours = trace.get("marker", {}).get("color")
    if isinstance(colours, list) and len(colours) == len(trace.get("x", [])):
        return [(str(label), colour) for label, colour in zip(trace["x"], colours) if isinstance(colour, str)]
    colour, name = _colour(trace), str(trace.get("name") or "")
    return [] if colour is None or not name else [(name, colour)]  # unnamed: a named trace's seeds or marks


#: What a figure of a model's parts names each part, before any bracket (lab 5's diagram and bars): each keeps its
#: colour in plots.COLORS.
PARTS = {"adapter": "adapter", "adapters": "adapter", "layernorm": "layernorm", "layernorms": "layernorm",
         "classifier": "head", "frozen": "frozen"}


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_every_stored_figure_sets_its_axis_titles_on_lines_that_fit_and_keeps_the_course_s_colours(lab):
    """What the decks and a student see are the stored figures, not what plots.py would draw today: a y-axis
    title longer than the plot is tall is cut on the slide, and a nonlinearity, method, task or pooler choice
    that changes colour between figures misleads a reader who learnt it from the first one, and so does a
    series that is none of them (a batch size, a layer) drawn in a method's or a task's colour."""
    from adapterlab.teaching.notebook import plots

    taken = {colour for colour, _ in plots.METHOD_STYLES.values()} | set(plots.TASK_COLORS)
    for index, figure in stored_figures(lab):
        for name, axis in figure["layout"].items():
            title = axis.get("title", {}) if name.startswith("yaxis") else {}
            text = title.get("text", "") if isinstance(title, dict) else str(title)
            assert all(len(line) <= plots.Y_TITLE_CHARS for line in text.split("<br>")), f"cell {index}: {text!r}"
        for trace in figure["data"]:
            for name, colour in _worn(trace):
                if plots.series_color(name.removesuffix(": each seed")):
                    assert colour == plots.series_color(name.removesuffix(": each seed")), f"cell {index}: {name} is {colour}"
                elif name.lower() in plots.ACTIVATION_COLORS:
                    assert colour == plots.ACTIVATION_COLORS[name.lower()], f"cell {index}: {name} is {colour}"
                elif plots.method_style(name) is not None:
                    assert colour == plots.method_style(name)[0], f"cell {index}: {name} is {colour}"
                elif part := PARTS.get(name.lower().split(" (")[0]):
                    assert colour == plots.COLORS[part], f"cell {index}: {name} is {colour}"
                else:  # no method, task or pooler choice: batch 32 in LoRA's orange reads as LoRA
                    assert colour not in taken, f"cell {index}: {name!r}, no method or task, wears {colour}"


@pytest.mark.parametrize("lab", all_labs(), ids=lambda lab: lab.stem)
def test_every_listing_of_package_code_a_lab_prints_is_today_s_code_and_fits_a_slide_line_by_line(lab):
    """A cell that prints the package's own source (`inspect.getsource`) shows what the package runs: lab 5 showed
    a forward without two lines the package had gained. Each line fits the slide's code width, so that no
    docstring breaks mid-phrase on the deck (lab 3's fold read "computed / in" across two lines)."""
    from adapterlab.teaching.instructor.slide_layout import CODE_CHARS

    nb = nbformat.read(lab, as_version=4)
    imports = ast.Module([node for cell in nb.cells if cell.cell_type == "code"
                          for node in ast.parse(cell.source).body if isinstance(node, (ast.Import, ast.ImportFrom))], [])
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or "inspect.getsource(" not in cell.source:
            continue
        namespace: dict = {}
        exec(compile(imports, str(lab), "exec"), namespace)
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(cell.source, namespace)
        stored = "".join(output.get("text", "") for output in cell.outputs)
        assert stored == printed.getvalue(), f"cell {index}: the stored listing is not the package's code today"
        wide = [line for line in stored.splitlines() if len(line) > CODE_CHARS]
        assert not wide, f"cell {index}: {len(wide)} lines wider than a slide's {CODE_CHARS} characters: {wide[0]!r}"
