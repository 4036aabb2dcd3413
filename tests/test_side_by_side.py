"""The pure helpers of benchmarks/side_by_side.py: the run order, the ratio summary, the TSV rows."""

from __future__ import annotations

import csv
import random
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import side_by_side  # noqa: E402


@pytest.mark.parametrize("repeats", [1, 2, 3, 4, 7])
def test_run_order_alternates_which_side_goes_first(repeats):
    order = side_by_side.run_order(repeats)
    assert len(order) == repeats
    assert all(sorted(pair) == ["adapterlab", "library"] for pair in order)
    firsts = [pair[0] for pair in order]
    assert firsts.count("adapterlab") == (repeats + 1) // 2
    assert firsts.count("library") == repeats // 2
    assert all(a != b for a, b in zip(firsts, firsts[1:]))


def test_summary_pairs_runs_by_repeat_and_takes_the_median_ratio():
    rng = random.Random(3)
    ours = [rng.uniform(50, 200) for _ in range(5)]
    theirs = [rng.uniform(200, 600) for _ in range(5)]
    runs = [{"repeat": k + 1, "side": "adapterlab", "wall_seconds": ours[k]} for k in range(5)]
    runs += [{"repeat": k + 1, "side": "library", "wall_seconds": theirs[k]} for k in range(5)]
    rng.shuffle(runs)  # the pairing must come from the repeat, not from the position in the list
    summary = side_by_side.summarise(runs)
    expected = np.asarray(ours) / np.asarray(theirs)
    np.testing.assert_allclose(summary["ratios"], expected, rtol=1e-12)
    assert summary["median_ratio"] == pytest.approx(float(np.median(expected)), rel=1e-12)
    assert summary["met"] == (float(np.median(expected)) <= side_by_side.TARGET_RATIO)


@pytest.mark.parametrize("ours, met", [(30.0, True), (40.0, True), (41.0, False)])
def test_target_is_met_at_or_below_the_ratio(ours, met):
    runs = [{"repeat": 1, "side": "adapterlab", "wall_seconds": ours},
            {"repeat": 1, "side": "library", "wall_seconds": 100.0}]
    assert side_by_side.summarise(runs)["met"] is met


def test_summary_refuses_a_repeat_without_both_sides():
    runs = [{"repeat": 1, "side": "adapterlab", "wall_seconds": 1.0},
            {"repeat": 1, "side": "library", "wall_seconds": 2.0},
            {"repeat": 2, "side": "library", "wall_seconds": 2.0}]
    with pytest.raises(ValueError, match="repeat 2 lacks a side"):
        side_by_side.summarise(runs)


def test_rows_round_trip_through_a_plain_tsv_reader(tmp_path):
    split = SimpleNamespace(texts=["a 'quoted' \"film\" , fine", "dull ; slow"], labels=[1, 0])
    path = tmp_path / "rows.tsv"
    side_by_side.write_rows(split, path)
    with path.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.reader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))
    assert rows[0] == ["sentence", "label"]
    assert [(text, int(label)) for text, label in rows[1:]] == list(zip(split.texts, split.labels))


def test_rows_with_a_tab_are_refused(tmp_path):
    split = SimpleNamespace(texts=["one\ttwo"], labels=[1])
    with pytest.raises(ValueError, match="tab or a line break"):
        side_by_side.write_rows(split, tmp_path / "rows.tsv")
