"""Verdicts as a table: the numbers are the comparisons' own, read the way round they are said, and the table
reads the same as HTML, as text and, cut over slides, on the deck."""

import dataclasses
from html.parser import HTMLParser

import numpy as np
import pytest
from scipy import stats

from adapterlab.runs.compare import compare, family
from adapterlab.runs.verdict_table import (
    COLUMNS,
    VerdictTable,
    decided_table,
    verdict_table,
)
from adapterlab.teaching.instructor.slide_layout import (
    LABEL_PX,
    SLIDE_BUDGET_PX,
    _split_outputs,
    output_height,
    text_table_rows,
)


class Cells(HTMLParser):
    """The text of every th/td of an HTML table, row by row (an independent reading of the markup)."""

    def __init__(self):
        super().__init__()
        self.rows, self._cell = [], None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th"):
            self._cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self.rows[-1].append(self._cell)
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def cells(html: str) -> list[list[str]]:
    parser = Cells()
    parser.feed(html)
    return parser.rows


RNG = np.random.default_rng(11)
A, B, C = (RNG.normal(mean, 0.004, 5) for mean in (0.86, 0.90, 0.861))


def test_each_row_holds_the_difference_and_the_interval_scipy_gives_and_names_the_one_ahead():
    table = decided_table([compare(A, B, names=("adapters", "full"), paired=True),
                           compare(A, C, names=("adapters", "LoRA"), paired=True)])
    behind, close = table.rows()
    paired = stats.ttest_rel(A, B).confidence_interval(0.95)  # same five seeds on both sides: read paired
    assert behind[0] == "adapters vs full" and behind[1] == f"{100 * (A.mean() - B.mean()):+.1f}"
    assert behind[2] == f"{100 * paired.low:+.1f} to {100 * paired.high:+.1f}"
    assert behind[3] == "full ahead" and behind[4] == "5 paired"
    welch = compare(list(A), list(C[:4]), names=("adapters", "LoRA"))
    assert decided_table([welch]).rows()[0][4] == "5 and 4"
    assert "the first side's and the second's" in decided_table([welch]).footer()
    assert "the first side's" not in table.footer()
    assert close[3] in ("level", "undecided")


def test_a_family_table_holds_the_verdicts_holm_decides_and_says_so():
    comparisons = [compare(RNG.normal(0.86 + gap, 0.01, 5), RNG.normal(0.86, 0.01, 5), names=(f"gap {gap}", "base"))
                   for gap in (0.0, 0.004, 0.012, 0.03, 0.0, 0.015)]
    table = verdict_table(comparisons)
    decided = family(comparisons)
    words = {"ahead": lambda v: f"{v.a} ahead", "behind": lambda v: f"{v.b} ahead", "level": lambda v: "level"}
    for row, verdict in zip(table.rows(), decided):
        expected = words.get(verdict.verdict, lambda v: None)(verdict)
        assert row[3] == expected if expected else row[3].startswith("undecided")
    assert "Holm over 6 verdicts" in table.footer()
    fallen = [(row, c) for row, c, d in zip(table.rows(), comparisons, decided) if c.decided and not d.decided]
    assert fallen  # this draw has one that falls
    for row, alone in fallen:  # the row says what its interval decided alone, naming the side ahead
        side = alone.a if float(row[1]) > 0 else alone.b  # the side the difference's sign favours
        assert row[3] == ("undecided (alone: level)" if alone.verdict == "level" else f"undecided (alone: {side} ahead)")
    assert "undecided (alone: …): what its interval decides alone" in table.footer()
    assert "undecided (alone" not in decided_table(comparisons).footer()  # alone, nothing falls


def test_a_table_showing_part_of_its_family_says_what_the_rest_is():
    comparisons = [compare(RNG.normal(0.86 + gap, 0.01, 5), RNG.normal(0.86, 0.01, 5), names=(f"gap {gap}", "base"))
                   for gap in (0.0, 0.01, 0.02, 0.03)]
    decided = family(comparisons)
    part = VerdictTable(tuple(decided[:2]), family="every gap against base")
    assert "Holm over 4 verdicts (2 here and 2 more: every gap against base)" in part.footer(), "two shown, four decided"
    whole = VerdictTable(tuple(decided), family="every gap against base")
    assert "Holm over 4 verdicts;" in whole.footer(), "a table that shows its whole family needs no word on it"


def test_an_undecided_row_says_how_many_seeds_would_settle_it_and_a_missing_one_says_not_stored():
    wide = compare(RNG.normal(0.86, 0.02, 3), RNG.normal(0.86, 0.02, 3), names=("r=8", "r=64"))
    assert wide.verdict == "undecided"
    table = VerdictTable((None, wide), ("r=2 vs r=64",))
    header, (missing, undecided) = table.header(), table.rows()
    assert header[:5] == COLUMNS and header[5] == "seeds needed" and "a true gap of 1.0 with 80 % power" in table.footer()
    assert missing[0] == "r=2 vs r=64" and missing[3] == "not stored yet"
    assert undecided[5] == (str(wide.seeds_for_power) if wide.seeds_for_power else "over 100")


def test_a_setting_or_a_hyphenated_word_in_a_name_or_a_verdict_cannot_break_on_a_slide():
    table = verdict_table([compare(A, B, names=("σ = 1e-06", "full fine-tuning"))])
    page = table._repr_html_()
    for word in ("σ = 1e-06", "fine-tuning"):  # a browser may break at the spaces of a setting, after a hyphen
        assert f'<span style="white-space: nowrap">{word}</span>' in page, word
    assert '<span style="white-space: nowrap">σ</span>' not in page
    assert "<span" not in page.split("<tbody>")[1].split("</tbody>")[0].split("</td>")[1]  # numbers stay bare


def test_the_html_and_the_text_hold_the_same_cells():
    table = verdict_table([compare(A, B, names=("Houlsby r=64", "full fine-tuning")),
                           compare(C, B, names=("LoRA r=8", "full fine-tuning")),
                           compare(A, C, names=("Houlsby r=64", "LoRA r=8"))], title="tuned, SST-2")
    expected = [list(table.header()), *map(list, table.rows())]
    assert cells(table._repr_html_()) == expected
    text = str(table).splitlines()
    assert text[0] == "tuned, SST-2" and text[-1] == table.footer()
    assert text_table_rows(text[1:-1]) == expected  # the deck's own reader of fixed-width tables agrees


def test_a_family_taller_than_a_slide_is_cut_between_rows_and_each_part_fits():
    import nbformat

    comparisons = [compare(RNG.normal(0.86, 0.01, 5), RNG.normal(0.86, 0.01, 5), names=(f"point {i}", "reference"))
                   for i in range(31)]
    table = verdict_table(comparisons)
    output = nbformat.v4.new_output("display_data", data={"text/html": table._repr_html_(), "text/plain": str(table)})
    cell = nbformat.v4.new_code_cell("table", outputs=[output])
    cell.metadata["transient"] = {"remove_source": True}
    pieces = _split_outputs(cell)
    pages = [output for piece in pieces for output in piece.outputs]
    assert len(pages) >= 3
    read = [cells("".join(page["data"]["text/html"])) for page in pages]
    assert all(rows[0] == list(table.header()) for rows in read)  # the header on every page
    assert [row for rows in read for row in rows[1:]] == [list(row) for row in table.rows()]  # every row once, in order
    sizes = [len(rows) - 1 for rows in read]
    assert max(sizes) - min(sizes) <= 1
    assert all(output_height(page) <= SLIDE_BUDGET_PX - LABEL_PX for page in pages)
    assert "verdict-footer" in "".join(pages[-1]["data"]["text/html"])
    assert not any("verdict-footer" in "".join(page["data"]["text/html"]) for page in pages[:-1])


@pytest.mark.parametrize("verdicts", [[], [None]])
def test_a_table_of_nothing_stored_still_reads(verdicts):
    table = decided_table(verdicts)
    assert str(table).splitlines()[0].startswith("compared")


def test_a_row_never_shows_an_interval_end_on_the_margin_it_does_not_reach():
    """"level: the whole interval between -1.0 and +1.0" under a row whose end shows +1.0 would read as touching the margin; an
    end within a twentieth of it gets the decimals that show which side it is on."""
    generator = np.random.default_rng(11)
    near = []
    for _ in range(300):
        n, spread = generator.integers(3, 7), generator.choice([0.001, 0.002, 0.003])
        shift = generator.choice([0.006, 0.008, 0.01, 0.012])
        near.append(compare(0.86 + shift + generator.normal(0, spread, n), 0.86 + generator.normal(0, spread, n)))
    table = VerdictTable(tuple(near))
    shown_on_margin = 0
    for verdict, row in zip(near, table.rows()):
        low, high = (float(end) for end in row[2].split(" to "))
        for said, true in ((low, 100 * verdict.low), (high, 100 * verdict.high)):
            assert said == pytest.approx(true, abs=0.05)
            if 0.0005 <= abs(abs(true) - 1.0) < 0.05:  # nearer than that, three decimals show it on the margin
                shown_on_margin += 1
                assert (abs(said) < 1.0) == (abs(true) < 1.0) and abs(said) != 1.0, row
    assert shown_on_margin > 10


def test_the_footer_says_why_an_end_of_an_interval_has_two_decimals():
    near = dataclasses.replace(compare(A, B, names=("r=8", "r=64")), low=-0.0097, high=0.004, verdict="level")
    plain = dataclasses.replace(near, low=-0.008)
    assert decided_table([near]).rows()[0][2] == "-0.97 to +0.4"  # one decimal would read "-1.0", on the bound
    assert "two decimals: an end that would round to ±1.0" in decided_table([near]).footer()
    assert "two decimals" not in decided_table([plain]).footer()
