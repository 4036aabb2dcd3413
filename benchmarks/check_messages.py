"""What the exercise checks tell each wrong answer in the test catalogue: accepted, named, or only told
what was measured. Runs the check tests with every refusal helper (``_fails``, ``_refused``) replaced by
a recorder, which calls the check as the helper would, keeps its message and lets the test go on. Then
times each check on a right answer with its default number of drawn cases (its first run and the median
of 3; a quiet machine for that part).

    python benchmarks/check_messages.py                  # this checkout's checks and catalogue
    python benchmarks/check_messages.py -v               # and every message that is not the one expected
    python benchmarks/check_messages.py --package DIR    # another checkout's checks, this catalogue (no timing)

Each wrong answer is counted once as:

* accepted: the check passed it;
* crashed: the check raised something other than CheckFailed;
* named: the message has the words its test expects, and names a mistake;
* measured: the message has the words its test expects, and says what was measured and where it differs
  (one of GENERIC_FORMS), naming no mistake: the answer matches none the check knows on every case;
* other: the message lacks the expected words; -v prints each, to be read by a person (one that names
  another mistake than the one made is misleading).

Stubs (the words "The answer is missing") are left out. With --package, an older checkout's checks meet
this catalogue, so the counts compare two versions on the same wrong answers (tests that need what the
old checks lack fail early; their answers are not counted: the table gives how many were reached).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ["tests/test_checks.py", "tests/test_checks_training.py", "tests/test_checks_anatomy.py",
             "tests/test_checks_audit.py"]
MISSING = "The answer is missing"
GENERIC_FORMS = ("Right on the", "right on the", "No single mistake we know", "Likely causes", "Sort the squares σ²")


def _record(check, arguments, words):
    """Call check(*arguments) as a refusal helper would; write what came back; return the message."""
    from adapterlab.teaching.exercises.checks import CheckFailed

    outcome, message = "accepted", ""
    try:
        check(*arguments)
    except CheckFailed as refusal:
        outcome, message = "rejected", str(refusal)
    except Exception as error:  # noqa: BLE001 - a crash is what is counted here
        outcome, message = "crashed", f"{type(error).__name__}: {error}"
    with open(os.environ["CHECK_MESSAGES_OUT"], "a", encoding="utf-8") as out:
        out.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
                              "check": getattr(check, "__name__", repr(check)), "words": list(words),
                              "outcome": outcome, "message": message}) + "\n")
    return message


def pytest_collection_finish(session):
    """Put the recorder in place of each catalogue module's refusal helper (this file is the plugin)."""
    for name, module in list(sys.modules.items()):
        if name.endswith("test_checks"):
            module._fails = lambda check, answer, *words: _record(check, (answer,), words)
        elif name.endswith("test_checks_training"):
            module._fails = lambda check, *answers, words=(): _record(check, answers, words)
        elif name.endswith("test_checks_anatomy"):
            module._fails = lambda answer, words=(), check=module.ca.check_effective_rank: _record(check, (answer,), words)
        elif name.endswith("test_checks_audit"):
            module._refused = lambda check, answer, *words: _record(check, (answer,), words)


def kind(record: dict) -> str:
    if record["outcome"] != "rejected":
        return record["outcome"]
    if not all(word in record["message"] for word in record["words"]):
        return "other"
    return "measured" if any(form in record["message"] for form in GENERIC_FORMS) else "named"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--package", type=Path, default=ROOT, help="the checkout whose adapterlab is checked")
    parser.add_argument("-v", action="store_true", help="print every message that lacks its expected words")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "records.jsonl"
        out.touch()
        environment = {**os.environ, "CHECK_MESSAGES_OUT": str(out), "OMP_NUM_THREADS": "1",
                       "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(args.package.resolve()),
                                                      str(ROOT / "tests")])}
        # -P: the working directory stays off sys.path, so adapterlab is imported from --package
        run = subprocess.run([sys.executable, "-P", "-m", "pytest", "-p", "check_messages", "-p", "no:cacheprovider",
                              "-q", "-rE", "--continue-on-collection-errors", *CATALOGUE], cwd=ROOT, env=environment,
                             capture_output=True, text=True, check=False)
        records = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    answers = [r for r in records if r["words"] != [MISSING]]
    counts = Counter(kind(r) for r in answers)
    print(f"checks of {args.package}: {len(answers)} wrong answers reached ({len(records) - len(answers)} stubs left out)")
    for line in run.stdout.splitlines():
        if line.startswith("ERROR tests/"):  # a module these checks cannot even import: none of its answers counted
            print(f"  not reached: {line.removeprefix('ERROR ')}")
    for name in ("named", "measured", "other", "accepted", "crashed"):
        print(f"  {name:9} {counts[name]:4}")
    for r in answers if args.v else ():
        if kind(r) in ("other", "accepted", "crashed"):
            print(f"\n{kind(r)}: {r['test']}\n  expected {r['words']}\n  got      {r['message'][:400]}")
    if args.package.resolve() != ROOT:
        return  # the right answers' timing is this checkout's: an older one may lack the drawn cases it names
    print("\nseconds per check, a right answer, default draws:\n  check               first  median of 3")
    for name, first, median in check_seconds():
        print(f"  {name:18} {first:6.2f} {median:12.2f}")


def check_seconds() -> list[tuple[str, float, float]]:
    """Seconds each check takes on its first right answer (tests/test_checks_drawn_right.py), default draws:
    the first call (what a student waits for: it fills the check's caches) and the median of 3."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    from test_checks_drawn_right import CASES

    rows = []
    for name, (check, _, _, right_answers) in sorted(CASES.items()):
        seconds = []
        for _ in range(3):
            began = time.perf_counter()
            with contextlib.redirect_stdout(io.StringIO()):
                check(*right_answers[0])
            seconds.append(time.perf_counter() - began)
        rows.append((name, seconds[0], statistics.median(seconds)))
    return rows


if __name__ == "__main__":
    main()
