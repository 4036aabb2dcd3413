"""Verdicts shown as a table: what is compared, the difference, its 95 % interval, the verdict and the seeds.

A lab that draws several verdicts from one table or figure shows them as one table, an HTML table in the
notebook and on the slide and aligned columns in a terminal, rather than as one long sentence each:
the verdicts can be read down a column and compared. :meth:`~.compare.Comparison.describe` keeps the full
sentence for the verdict a lab reads word by word (lab 7 teaches how).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from .compare import POWER, Comparison, family, shown

COLUMNS = ("compared", "difference", "95 % interval", "verdict", "seeds")


def verdict_words(verdict: Comparison) -> str:
    """The verdict column's words: which side is ahead, level, or undecided (and what its interval said alone)."""
    if verdict.verdict == "ahead":
        return f"{verdict.a} ahead"
    if verdict.verdict == "behind":
        return f"{verdict.b} ahead"
    if verdict.verdict == "level":
        return "level"
    if verdict.interval_alone != "undecided":  # decided alone: only its family's correction undid that
        alone = {"level": "level", "ahead": f"{verdict.a} ahead", "behind": f"{verdict.b} ahead"}[verdict.interval_alone]
        return f"undecided (alone: {alone})"
    return "undecided"


@dataclass(frozen=True)
class VerdictTable:
    """Verdicts already decided (alone, or together by :func:`~.compare.family`), one row each; a None
    verdict is a comparison whose runs are not stored yet (``labels`` names it)."""

    verdicts: tuple
    labels: tuple = ()  # what each row compares, where "a vs b" would not say it (a budget, a verdict not stored)
    title: str = ""
    scale: float = 100.0  # differences and intervals are shown ×100: points of accuracy or of MCC
    family: str = ""  # what else the family holds, where it is larger than the table: a reader counts the rows

    def _label(self, index: int, verdict: Comparison | None) -> str:
        if index < len(self.labels) and self.labels[index]:
            return self.labels[index]
        return "—" if verdict is None else f"{verdict.a} vs {verdict.b}"

    def rows(self) -> list[tuple[str, ...]]:
        """Each verdict as the table's cells (strings), in :data:`COLUMNS` order, with the seeds that would
        settle an undecided one last where any row is undecided."""
        rows = []
        for index, verdict in enumerate(self.verdicts):
            if verdict is None:
                rows.append((self._label(index, None), "", "", "not stored yet", ""))
                continue
            d, lo, hi = (self.scale * x for x in (verdict.difference, verdict.low, verdict.high))
            seeds = f"{verdict.n_a} paired" if verdict.paired else \
                str(verdict.n_a) if verdict.n_b is None or verdict.n_b == verdict.n_a else f"{verdict.n_a} and {verdict.n_b}"
            margin = (self.scale * verdict.margin,)
            rows.append((self._label(index, verdict), f"{d:+.1f}", f"{shown(lo, margin)} to {shown(hi, margin)}",
                         verdict_words(verdict), seeds))
        if any(verdict is not None and verdict.verdict == "undecided" for verdict in self.verdicts):
            rows = [(*row, self._settle(verdict)) for row, verdict in zip(rows, self.verdicts)]
        return rows

    @staticmethod
    def _settle(verdict: Comparison | None) -> str:
        if verdict is None or verdict.verdict != "undecided" or verdict.n_a < 2:
            return ""
        return "over 100" if verdict.seeds_for_power is None else str(verdict.seeds_for_power)

    def header(self) -> tuple[str, ...]:
        rows = self.rows()
        settle = "seeds needed"
        return COLUMNS + ((settle,) if rows and len(rows[0]) > len(COLUMNS) else ())

    def _margin(self) -> float:
        return next((self.scale * v.margin for v in self.verdicts if v is not None), 1.0)

    def footer(self) -> str:
        """How to read the table, in one line: the sign of the difference, the margin, and only what its rows
        need besides (the family, a verdict the family undid, unpaired seeds, the seeds needed)."""
        decided = [verdict for verdict in self.verdicts if verdict is not None]
        size = max((verdict.family_size for verdict in decided), default=1)
        rows = self.rows()
        words = [row[3] for row in rows]
        parts = ["difference: the first minus the second, in points (×100)",
                 f"level: the whole interval between -{self._margin():.1f} and +{self._margin():.1f}"]
        if any(re.search(r"\.\d\d", row[2]) for row in rows):
            parts.append(f"two decimals: an end that would round to ±{self._margin():.1f}")
        if size > 1:
            held = f" ({len(decided)} here and {size - len(decided)} more: {self.family})" \
                if self.family and size > len(decided) else ""
            parts.append(f"decided together, Holm over {size} verdicts{held}; each interval is its comparison's own")
        if any(word.startswith("undecided (alone") for word in words):
            parts.append("undecided (alone: …): what its interval decides alone, which Holm's correction for the "
                         "family does not confirm")
        if any(not verdict.paired and verdict.n_b is not None and verdict.n_b != verdict.n_a for verdict in decided):
            parts.append('seeds "5 and 3": the first side\'s and the second\'s')
        if len(self.header()) > len(COLUMNS):
            parts.append(f"seeds needed: per setting, for this comparison alone to find a true gap of "
                         f"{self._margin():.1f} with {round(100 * POWER)} % power (a family needs more)")
        return "; ".join(parts)

    def __str__(self) -> str:
        table = [self.header(), *self.rows()]
        widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
        lines = ["  ".join(cell.ljust(width) if c in (0, 3) else cell.rjust(width)
                           for c, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in table]
        return "\n".join(([self.title] if self.title else []) + lines + [self.footer()])

    __repr__ = __str__

    def _repr_html_(self) -> str:
        def cell(tag: str, value: str, c: int) -> str:
            numeric = ' class="deck-number"' if tag == "td" and c not in (0, 3) else ""
            return f"<{tag}{numeric}>{_unbroken(html.escape(value))}</{tag}>"

        head = "".join(cell("th", value, c) for c, value in enumerate(self.header()))
        body = "".join("<tr>" + "".join(cell("td", value, c) for c, value in enumerate(row)) + "</tr>"
                       for row in self.rows())
        caption = f"<caption>{html.escape(self.title)}</caption>" if self.title else ""
        return (f'<table class="deck-table verdict-table">{caption}<thead><tr>{head}</tr></thead>'
                f'<tbody>{body}</tbody></table><p class="verdict-footer"><small>{html.escape(self.footer())}'
                "</small></p>")


#: A setting written "name = value" ("σ = 1e-06", "r = 64"), whose parts make sense only together, or a word with
#: a hyphen inside ("1e-06", "fine-tuning", "top-1"), after which a browser may break a line.
_UNBREAKABLE = re.compile(r"[^\s<>]+ = [^\s<>]+|[^\s<>]*\w-\w[^\s<>]*")


def _unbroken(text: str) -> str:
    """Escaped cell text whose settings and hyphenated words cannot break: a names column squeezed on a slide wraps
    between them ("σ = 1e-06 vs" / "σ = 1e-01"), never inside a setting ("σ =" / "1e-01") or a number ("1e-" /
    "01")."""
    return _UNBREAKABLE.sub(lambda word: f'<span style="white-space: nowrap">{word[0]}</span>', text)


def verdict_table(comparisons, title: str = "") -> VerdictTable:
    """The comparisons decided as one family (:func:`~.compare.family`), as a table."""
    return decided_table(family(list(comparisons)), title)


def decided_table(verdicts, title: str = "", labels=(), family: str = "") -> VerdictTable:
    """Verdicts already decided (by :func:`~.compare.family`, or a lab's tuned-table family) as a table, each
    row naming its two sides unless ``labels`` names it (a None verdict, not stored yet, needs one). One verdict
    is a table of one row: a lab shows every verdict the same way, and keeps the sentence
    (:meth:`~.compare.Comparison.describe`) for the one it reads word by word. ``family`` says what else the
    family holds where it is larger than the table."""
    return VerdictTable(tuple(verdicts), labels=tuple(labels), title=title, family=family)
