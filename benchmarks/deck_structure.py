"""How each lab's deck is cut into slides, from the layout alone (no export, no browser): slides, the
slides split off a full one (marked "(continued)"), the slides over the estimated height (the deck scales
those, within a readable limit) and the notes two slides share.

    python benchmarks/deck_structure.py          # every lab
    python benchmarks/deck_structure.py -v       # and every slide of every lab

The browser tests (tests/browser/test_slides_fit.py) are the judge of what fits; this table is the quick
count behind the README's numbers.
"""

from __future__ import annotations

import sys
from collections import Counter

import nbformat

from adapterlab.teaching.instructor.labfiles import all_labs
from adapterlab.teaching.instructor.slide_layout import SLIDE_BUDGET_PX, deck_outline


def main(verbose: bool) -> None:
    total = Counter()
    print(f"{'lab':34} {'slides':>6} {'continued':>12} {'over height':>11} {'notes shared':>12}")
    for lab in all_labs():
        slides = deck_outline(nbformat.read(lab, as_version=4))
        counts = Counter(slide["notes"] for slide in slides if slide["notes"])
        row = Counter(slides=len(slides), continued=sum(s["continued"] for s in slides),
                      over=sum(s["height"] > SLIDE_BUDGET_PX for s in slides),
                      shared=sum(n for n in counts.values() if n > 1))
        total += row
        print(f"{lab.stem:34} {row['slides']:6} {row['continued']:5} ({row['continued'] / row['slides']:4.0%})"
              f" {row['over']:11} {row['shared']:12}")
        for number, slide in enumerate(slides, 1) if verbose else ():
            print(f"    {number:3} {'CONT' if slide['continued'] else '    '} {slide['height']:4} px  {slide['title'][:80]}")
    print(f"{'all':34} {total['slides']:6} {total['continued']:5} ({total['continued'] / total['slides']:4.0%})"
          f" {total['over']:11} {total['shared']:12}")


if __name__ == "__main__":
    main("-v" in sys.argv[1:])
