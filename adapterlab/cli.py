"""`adapterlab ...` / `python -m adapterlab ...`: the command line.

This module owns what every subcommand shares: parsing, checking the arguments before anything slow
starts, and reporting. The work itself is done by the modules the labs use (training, evaluation,
slides, ...).

One error style: a single line ``adapterlab COMMAND: message`` on stderr that says what to do.
One exit-code policy:

* 0  the command did what was asked;
* 1  it failed while working (training diverged, a data file or notebook is damaged, a write failed);
* 2  usage: an argument is wrong (a bad value, a missing folder, a non-empty ``--out``); nothing was done;
* 130  interrupted (Ctrl-C, or SIGTERM, which is handled the same way). ``train`` still writes the run it
  has so far (marked "interrupted"); ``sweep`` and ``ablate`` keep the runs they completed, never the one
  they cut short.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from . import methods
from .model.placement import PLACEMENTS
from .training.config import add_setting_flags, config_from_args, settings
from .training.data import TASKS

OK, FAILED, USAGE, INTERRUPTED = 0, 1, 2, 130


class CommandError(Exception):
    """A subcommand cannot go on. ``code`` is its exit code: FAILED or USAGE."""

    def __init__(self, message: str, code: int = FAILED):
        super().__init__(message)
        self.code = code


@contextlib.contextmanager
def usage_errors():
    """Turn a ValueError or OSError raised while the arguments are checked into a usage error (exit 2)."""
    try:
        yield
    except (ValueError, OSError) as error:
        raise CommandError(str(error), USAGE) from error


def _add_own_task_flags(parser: argparse.ArgumentParser) -> None:
    """Flags that make a task of the user's own CSV/TSV/JSON files (adapterlab.training.data.own_task)."""
    own = parser.add_argument_group(
        "your own task (instead of --task)",
        "The files are read in memory, as they are when the command starts: nothing is copied or cached from them. "
        "A run records their fingerprint (both files, the columns and the metric), not their rows, so evaluate takes the same "
        "flags train was given.")
    own.add_argument("--train-file", default=None, metavar="FILE", help="labelled rows to train on (.csv, .tsv, .json)")
    own.add_argument("--dev-file", default=None, metavar="FILE", help="labelled rows to evaluate on (same columns)")
    own.add_argument("--text-column", nargs="+", default=None, metavar="COL",
                     help="the column holding the sentence, or two columns for sentence pairs")
    own.add_argument("--label-column", default="label", metavar="COL", help="the column holding the class (default: label)")
    own.add_argument("--metric", default="accuracy", choices=["accuracy", "f1", "mcc"],
                     help="what scores the task and picks the evaluation a run keeps, as GLUE's tasks are scored: f1 "
                          "of the second of two classes in sorted order (as of MRPC's label 1), mcc the Matthews "
                          "correlation (default: accuracy)")


def _task_of(args, trained_as: str | None = None) -> str | None:
    """The task's name: the user's own files' (registered for this process) when they are given, else --task;
    ``trained_as``: the own task a saved set was trained on, which the files must be."""
    from .training.data import dev_rows_in_train, get_task, own_task

    given = [args.train_file, args.dev_file, args.text_column]
    if not any(given):
        if args.metric != "accuracy":
            raise CommandError(f"--metric {args.metric} scores your own task (--train-file …); GLUE's tasks are scored "
                               "as GLUE scores them", USAGE)
        return get_task(args.task).name if args.task else None
    if not all(given):
        raise CommandError("your own task needs --train-file, --dev-file and --text-column together", USAGE)
    if args.task:
        raise CommandError(f"--task {args.task} and your own files (--train-file …) name two tasks: pass one of them",
                           USAGE)
    with usage_errors():
        spec = own_task(args.train_file, args.dev_file, args.text_column, args.label_column, trained_as, args.metric)
    shared, dev_rows = dev_rows_in_train(spec)
    if shared:
        print(f"adapterlab {args.command}: note: {shared} of the dev file's {dev_rows} rows also "
              "occur word for word in the train file; their score measures memory, not how the model generalises",
              file=sys.stderr)
    return spec.name


def _add_training_settings(parser: argparse.ArgumentParser, *, seeds: bool, precision: str = "auto",
                           method_choices=None) -> None:
    """Every training setting as a flag, the same names on every subcommand that trains (declared once, in
    :mod:`adapterlab.settings`' form); a command that trains several seeds takes --seeds instead of --seed."""
    names = [name for name in settings() if name != "device" and not (seeds and name == "seed")]
    add_setting_flags(parser, names, defaults={"precision": precision})
    parser.set_defaults(method_choices=method_choices)


def _training_config(args, **fixed):
    """The TrainConfig the flags describe; a method outside the command's own choices is a usage error."""
    allowed = args.method_choices
    if allowed is not None and args.method not in allowed:
        raise ValueError(f"method must be one of {', '.join(allowed)} here; got {args.method!r}")
    return config_from_args(args, **fixed)


class _Parser(argparse.ArgumentParser):
    """argparse with the project's error style: one line naming the command, the option and what to do,
    instead of the whole usage text (exit 2)."""

    def error(self, message):
        print(f"{self.prog}: {message}; `{self.prog} --help` lists the options", file=sys.stderr)
        sys.exit(USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="adapterlab", description="A teaching lab on bottleneck adapters.",
                                     epilog="Exit codes: 0 ok, 1 failed, 2 bad arguments, 130 interrupted.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tasks = list(TASKS)

    commands.add_parser("doctor", help="check the installation, backbones and data")

    count = commands.add_parser("count", help="parameter counts: closed form beside the real model")
    count.add_argument("--backbone", default="bert-base", help="bert-base, bert-large, or a backbone name")
    count.add_argument("--placement", default="houlsby", help=", ".join(PLACEMENTS))
    count.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r")
    count.add_argument("--frozen-layernorm", action="store_true", help="count LayerNorms as frozen")
    count.add_argument("--num-labels", type=int, default=2)
    counted = [m.name for m in methods.REGISTRY.values() if m.count is not None and m.name not in PLACEMENTS]
    count.add_argument("--method", default=None, choices=counted,
                       help="count another method than adapters (its settings as for train, e.g. --lora-rank)")
    add_setting_flags(count, ["lora_rank", "lora_targets", "train_pooler"])
    count.add_argument("--json", action="store_true", help="machine-readable output")

    train = commands.add_parser("train", help="train one method on a GLUE task; write the adapter set and metrics.json")
    train.add_argument("--task", default=None, choices=tasks, help="the GLUE task (default: sst2)")
    _add_training_settings(train, seeds=False)
    train.add_argument("--backbone", default="bert-base-uncased",
                       help="bert-base-uncased (offline: the stand-in), all-MiniLM-L6-v2, bert-base-random, tiny-random")
    train.add_argument("--data", default=None, metavar="DIR",
                       help="a GLUE folder (default: $ADAPTERLAB_DATA, then the hub, then the toy sets)")
    train.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    train.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    train.add_argument("--out", required=True, metavar="DIR",
                       help="a new or empty folder for the run: metrics.json and, for a method with a saved set, "
                            "the trained set")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run already in --out (only once the new run is written)")
    train.add_argument("--save-dtype", choices=sorted(SAVE_DTYPES), default="fp32",
                       help="the dtype the adapter set is written in: fp16 or bf16 halve the file, for a set "
                            "kept in a repository; loading casts back to the model's. A weight beyond fp16's range "
                            "keeps the set in fp32, and values too small for it are counted (default: fp32)")
    _add_own_task_flags(train)

    evaluate = commands.add_parser("evaluate", help="evaluate a saved adapter set on its task's dev set")
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="a folder written by `adapterlab train`")
    evaluate.add_argument("--task", default=None, choices=tasks, help="must be the task the set was trained on")
    evaluate.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    evaluate.add_argument("--backbone", default=None, help="default: the backbone the adapter set was trained on")
    evaluate.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    _add_own_task_flags(evaluate)

    sweep = commands.add_parser(
        "sweep", help="train a grid of settings x seeds into the run store; shards split it, a rerun resumes it",
        description="Every combination of the --grid values, for every seed, is trained once and stored in the run "
                    "store; runs already stored (by any shard, or an earlier interrupted sweep) are not trained again.")
    sweep.add_argument("--task", default="sst2", choices=tasks)
    sweep.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                       help="a training setting and its values, e.g. --grid init_scale=1e-4,1e-2 --grid bottleneck=8,64 "
                            "(any TrainConfig field; repeat for a grid)")
    sweep.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    _add_training_settings(sweep, seeds=True, precision="fp32")
    sweep.add_argument("--backbone", default="bert-base-uncased", help="as for train")
    sweep.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    sweep.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    sweep.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    sweep.add_argument("--shard", default="1/1", metavar="I/N",
                       help="run the I-th of N shares of the grid (1/2 and 2/2 in two processes or machines)")
    sweep.add_argument("--store", default=None, metavar="DIR",
                       help="the run store (default: $ADAPTERLAB_RUNS, else runs/store in the project)")

    ablate = commands.add_parser(
        "ablate", help="train a run per seed and store its span ablation (lab 8); a rerun skips stored seeds",
        description="For every seed: train the run (Houlsby adapters unless --method says otherwise), switch its "
                    "adapters off span by span on --eval-rows dev rows, and store the score matrix in the run store.")
    ablate.add_argument("--task", default="sst2", choices=tasks)
    ablate.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    _add_training_settings(ablate, seeds=True, precision="fp32", method_choices=PLACEMENTS)
    ablate.add_argument("--eval-rows", type=int, default=300, metavar="N", help="dev rows scored per span (default: 300)")
    ablate.add_argument("--backbone", default="bert-base-uncased", help="as for train")
    ablate.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    ablate.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    ablate.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate training on N dev rows")
    ablate.add_argument("--store", default=None, metavar="DIR",
                        help="the run store (default: $ADAPTERLAB_RUNS, else runs/store in the project)")

    tune = commands.add_parser(
        "tune", help="the fair comparison: every method's learning rate chosen on validation rows, then 5 seeds",
        description="Seed 0 over each method's learning-rate grid (a near tie decided on two seeds; extended past "
                    "an edge that wins either way), the rate with the best validation score, then seeds 0-4 at it "
                    "(fixed in advance for every point), then the budget check; every run stored as it finishes, "
                    "so a rerun resumes. Prints each point's selected rate and dev mean and spread, the claims' "
                    "verdicts (paired by seed, Holm over the table's family) and the budget check. Tasks with a "
                    "protocol: sst2, cola.")
    tune.add_argument("--task", default="sst2", choices=tasks)
    tune.add_argument("--points", default=None, metavar="LABEL,...",
                      help="only these points of the comparison (default: all), e.g. 'Houlsby r=64,BitFit'")
    tune.add_argument("--backbone", default="bert-base-uncased", help="as for train")
    tune.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    tune.add_argument("--shard", default="1/1", metavar="I/N",
                      help="train the I-th of N shares (each run has one owner; a shard waits where a selection "
                           "needs the other's runs)")
    tune.add_argument("--store", default=None, metavar="DIR",
                      help="the run store (default: $ADAPTERLAB_RUNS, else runs/store in the project)")
    tune.add_argument("--report", action="store_true", help="train nothing: print what the store holds")

    slides = commands.add_parser("slides", help="export the labs to reveal.js slide decks that open offline")
    slides.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    slides.add_argument("--out", default="build/slides", help="folder for the decks (default: build/slides)")
    slides.add_argument("--pdf", action="store_true", help="also print each deck to a PDF, one page per slide (needs Chromium)")
    slides.add_argument("--contact-sheet", action="store_true",
                        help="also draw every slide of each deck as a thumbnail on one PNG, LAB.contact.png (needs Chromium)")

    student = commands.add_parser("student", help="write student copies of the labs, solutions stubbed out")
    student.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    student.add_argument("--out", default="build/student", help="folder for the copies (default: build/student)")
    course = commands.add_parser("course", help="write an nbgrader course folder from the labs (to release, collect "
                                 "and autograde them; needs pip install adapterlab[course])")
    course.add_argument("out", metavar="DIR", help="the course folder to write (nbgrader_config.py and source/)")
    course.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab "
                        "with an exercise)")
    _add_interop_commands(commands)
    return parser


# --------------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------------


def _run_stores(folder) -> tuple[list, object]:
    """The stores a sweep or ablation reads (``--store`` alone, else the defaults) and the folder its new runs
    go to, as it prints: relative to the project (runs/store), not as an absolute path."""
    from .paths import PROJECT_ROOT
    from .runs.store import RunStore, default_stores

    stores = default_stores() if folder is None else [RunStore(folder)]
    own = stores[0].folder
    with contextlib.suppress(ValueError):
        own = own.relative_to(PROJECT_ROOT)
    return stores, own


def _check_rows(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise CommandError(f"{flag} must be a number of rows >= 1; got {value}", USAGE)


#: The size options and the limit of each (adapterlab.validation.SIZE_LIMITS); the seed has its own range.
#: train --save-dtype: the torch dtype (by name) a trained set is written in; fp32 keeps the model's.
SAVE_DTYPES = {"fp32": None, "fp16": "float16", "bf16": "bfloat16"}


def _save_dtype(args):
    import torch

    name = SAVE_DTYPES[args.save_dtype]
    return getattr(torch, name) if name else None


def _save_in_dtype(save, model, dtype) -> None:
    """``save(dtype)`` for train --save-dtype, keeping the run whatever the weights: a set with a weight beyond the
    dtype's range is written in the model's dtype instead, and values too small for it, which become 0, are
    counted; either is said in one line."""
    from .methods.checkpoints import OutOfRange, flushed_to_zero

    try:
        save(dtype)
    except OutOfRange as error:
        print(f"adapterlab train: warning: {error.reason}: the set is written in "
              "the model's dtype instead (twice the size)", file=sys.stderr)
        save(None)
        return
    lost, total = flushed_to_zero(model, dtype)
    if lost:
        name = str(dtype).removeprefix("torch.")
        print(f"adapterlab train: note: {lost:,} of {total:,} saved values are too small for {name} "
              f"(below {_smallest_value(dtype):.3g}) and are written as 0; --save-dtype fp32 keeps them", file=sys.stderr)


def _smallest_value(dtype) -> float:
    """The smallest magnitude `dtype` holds (its smallest subnormal)."""
    import torch

    return torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps


_SIZE_OPTIONS = {"bottleneck": "bottleneck", "lora_rank": "rank", "top_k": "top_k", "num_labels": "num_labels",
                 "batch_size": "batch_size", "max_train": "rows", "max_eval": "rows", "eval_rows": "rows",
                 "max_steps": "steps", "eval_every": "eval_every", "validation_rows": "rows"}


def _check_sizes(args) -> None:
    """Every size option within what a model can be, and the seed within what the generators take: one
    line naming the option (exit 2) before anything is built."""
    from .validation import SIZE_LIMITS, check_seed, check_size

    for dest, limit in _SIZE_OPTIONS.items():
        value = getattr(args, dest, None)
        if isinstance(value, int) and value >= 1:  # below 1: the checks of the settings themselves say so
            try:
                flag = settings()[dest].flags[0] if dest in settings() else f"--{dest.replace('_', '-')}"
                check_size(flag, value, SIZE_LIMITS[limit])
            except ValueError as error:
                raise CommandError(str(error), USAGE) from None
    if getattr(args, "seed", None) is not None:
        try:
            check_seed("--seed", args.seed)
        except ValueError as error:
            raise CommandError(str(error), USAGE) from None


#: The signal that stopped the command, when it was not Ctrl-C (SIGTERM: a scheduler or `kill`).
_STOPPED_BY: list[str] = []


def _stopped() -> str:
    return f"interrupted ({_STOPPED_BY[-1]})" if _STOPPED_BY else "interrupted"


def _terminate_like_ctrl_c(signum, frame) -> None:
    """SIGTERM is handled as Ctrl-C: the command stops where it is, keeps what is complete and exits 130."""
    import signal

    _STOPPED_BY.append(signal.Signals(signum).name)
    raise KeyboardInterrupt


def _diverged_report(task: str, config, error) -> dict:
    """metrics.json for a run that diverged: no metrics and no adapter set, but the partial history and
    what the run was (config, backbone, data), so the failure can be read afterwards."""
    from dataclasses import asdict

    history = error.history
    return {"status": "diverged", "task": task, "error": str(error), "diverged_at_step": error.step,
            "metrics": {}, "checkpoint": None, "config": config.as_dict(),
            "precision": error.precision.precision if error.precision is not None else None,
            "backbone": asdict(error.backbone_info) if error.backbone_info is not None else None,
            "data": error.data_description, "toy_data": error.toy_data,
            "history": {"rows": history.rows(), **history.as_dict()}}


def train_command(args) -> int:
    """`adapterlab train`: check every argument and --out, train, then write the run folder whole.

    Adapter methods, LoRA and BitFit write the set they train and metrics.json; full, top_k, layernorm
    and head change the backbone's own weights and write metrics.json only. Ctrl-C writes the
    run so far (status "interrupted", the best state seen) and exits 130; a diverged run writes its
    partial history (status "diverged") and exits 1.
    """
    from .methods import saveable
    from .methods.checkpoints import save_adapter_set
    from .runs.folder import claim_run_folder, prepare_run_folder, recover_run_folder
    from .training.data import check_glue_setting

    task = _task_of(args) or "sst2"
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    _check_sizes(args)
    with usage_errors():
        config = _training_config(args)
        check_glue_setting(args.data, task)
    try:
        if _process_rank() > 0:  # torchrun / accelerate: every process trains, the first one writes the run
            return _train_without_writing(args, task, config)
        with contextlib.ExitStack() as held:
            with usage_errors():
                held.enter_context(claim_run_folder(args.out))  # a second train into the same --out stops here
                recovered = recover_run_folder(args.out)
                if recovered:
                    print(f"adapterlab train: {recovered}", file=sys.stderr)
                staging = prepare_run_folder(args.out, overwrite=args.overwrite)
            return _train_into(args, task, config, staging, saveable(), save_adapter_set)
    finally:
        _end_process_group()


def _end_process_group() -> None:
    """Close the process group that a multi-process run trained in, once this process needs it no more.

    Left open, gloo's worker threads still hold tensors while Python shuts down, and a process that
    has written everything may still abort at exit ("terminate called without an active exception",
    exit code -6), which torchrun reports as a failed run. torch asks every process to call
    destroy_process_group at its end; no collective runs after training, so no process waits here.
    """
    import torch.distributed

    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _process_rank() -> int:
    """This process's rank among the processes torchrun or accelerate started (0 when there is one)."""
    import os

    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


def _train_without_writing(args, task, config) -> int:
    """train_command in a process other than the first of a multi-process run: it trains its share (the
    processes step together) and leaves --out, its lock and its staging folder to the first process."""
    from .training import run_experiment

    result = run_experiment(task, config, backbone=args.backbone, data_dir=args.data, max_train=args.max_train,
                            max_eval=args.max_eval)
    return INTERRUPTED if result.interrupted else OK


def _train_into(args, task, config, staging, saved_methods, save_adapter_set) -> int:
    """train_command once --out is claimed and its staging folder made: train, write, commit."""
    from .runs.folder import (
        commit_run_folder,
        discard_staging,
        os_error_reason,
        write_metrics,
    )
    from .training import TrainingDiverged, run_experiment
    from .training.backbones import STANDIN
    from .training.data import get_task

    out = Path(args.out)
    keep = False  # a run written whole whose commit failed stays in its staging folder, and the message says so
    try:
        result = run_experiment(task, config, backbone=args.backbone, data_dir=args.data,
                                max_train=args.max_train, max_eval=args.max_eval)
        if result.backbone_info.loaded == STANDIN and not config.train_pooler:
            print("adapterlab train: warning: the stand-in's pooler was never trained to summarise a sentence and "
                  "stayed frozen (lab 5), which can leave the classifier at the majority class: pass --train-pooler",
                  file=sys.stderr)
        report = {"status": "interrupted" if result.interrupted else "complete", "task": task, **result.to_dict()}
        report["checkpoint"] = str(out) if config.method in saved_methods else None

        def save(folder):
            _save_in_dtype(lambda dtype: save_adapter_set(result.model, folder, backbone=result.backbone_info, dtype=dtype,
                                                          extra={"task": task, "seed": config.seed,
                                                                 "label_names": list(get_task(task).label_names),
                                                                 "metrics": result.metrics}),
                           result.model, _save_dtype(args))

        if not report["checkpoint"]:
            report["note"] = f"method {config.method} trains the backbone's own weights: no adapter set is written"
        try:
            if report["checkpoint"]:
                save(staging)
            write_metrics(staging, report)
        except OSError as error:
            raise CommandError(_lost_write(out, error, result, report, save)) from None
        keep = True
        commit_run_folder(staging, out)
        keep = False
    except TrainingDiverged as error:
        write_metrics(staging, _diverged_report(task, config, error))
        keep = True
        commit_run_folder(staging, out)
        keep = False
        raise CommandError(f"{error}. The partial history is in {out}/metrics.json") from None
    except OSError as error:
        if keep:
            raise CommandError(f"the run is written whole but could not take the place of {out} "
                               f"({os_error_reason(error)}); it is kept in {staging}: rename that folder to use "
                               "it") from None
        raise
    finally:
        if not keep:
            discard_staging(staging)  # a run that failed before it was written; after a commit there is nothing left
    print(result.summary(sources=not config.progress))  # with progress on, run_experiment printed them
    print(f"wrote {out / 'metrics.json'}" + (f" and the adapter set in {out}" if report["checkpoint"] else ""))
    if result.interrupted:
        print(f"adapterlab train: {_stopped()} after {len(result.history.steps)} steps; {out} holds the run so far "
              "(metrics.json says \"interrupted\")", file=sys.stderr)
        return INTERRUPTED
    return OK


def _lost_write(out: Path, error: OSError, result, report: dict, save) -> str:
    """The message for a run trained in full whose files could not be written: why, and where it was kept
    instead (a folder in the system's temporary folder, often another disk), or that it is lost."""
    import shutil
    import tempfile

    from .runs.folder import os_error_reason, write_metrics

    kept = None
    try:
        kept = Path(tempfile.mkdtemp(prefix="adapterlab-run-"))
        if report.get("checkpoint"):
            save(kept)
        write_metrics(kept, {**report, "checkpoint": str(kept) if report.get("checkpoint") else None})
        where = f"it is kept in {kept}"
    except OSError:
        if kept is not None:
            shutil.rmtree(kept, ignore_errors=True)
        where = "nothing of it could be kept"
    return (f"the run trained, but writing it to {out} failed ({os_error_reason(error)}); {where}. Free space or "
            "choose another --out, then train again")


# --------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------


def evaluate_command(args) -> int:
    """`adapterlab evaluate`: load a run folder's adapter set into its backbone and score it on the dev set
    of the task it was trained on; print the metrics (the last line is JSON)."""
    import json
    import math

    from .methods.checkpoints import load_adapter_set
    from .runs.folder import adapter_set_config, recover_unlocked
    from .training.backbones import load_backbone
    from .training.data import (
        OWN_PREFIX,
        check_glue_setting,
        get_task,
        load_split,
        tokenize,
    )
    from .training.evaluation import evaluate, pick_device

    _check_rows("--max-eval", args.max_eval)
    _check_sizes(args)
    with usage_errors():
        recovered = recover_unlocked(args.checkpoint)
        if recovered:
            print(f"adapterlab evaluate: {recovered}", file=sys.stderr)
        manifest = adapter_set_config(args.checkpoint)
        extra = manifest.get("extra") or {}
        trained_on = extra.get("task")
        own = trained_on if trained_on and trained_on.startswith(OWN_PREFIX) else None
        task = get_task(_task_of(args, trained_as=own) or trained_on or "sst2")
        if trained_on and task.name != get_task(trained_on).name:
            given = "your own files" if task.files else task.name
            drop = "drop the --train-file, --dev-file and --text-column flags" if task.files else "drop --task"
            raise CommandError(f"the adapter set in {args.checkpoint} was trained on {trained_on}, not {given}: its "
                               f"classifier head scores {trained_on}'s labels; {drop}, or pass --task {trained_on}",
                               USAGE)
        check_glue_setting(args.data, task)
    seed = int(extra.get("seed", 0))  # random backbones are rebuilt from the seed they were trained on
    model, tokenizer, info = load_backbone(args.backbone or manifest["backbone"]["name"],
                                           num_labels=manifest["backbone"]["num_labels"], seed=seed)
    load_adapter_set(model, args.checkpoint)
    split = load_split(task, "dev", args.data, max_examples=args.max_eval, seed=seed)
    metrics = evaluate(model, tokenize(split, tokenizer), device=pick_device("auto"))
    print(info.describe())
    print(f"eval: {split.describe()}")
    broken = sorted(name for name, value in metrics.items()
                    if isinstance(value, float) and not math.isfinite(value))
    if broken:  # outputs that overflowed make every prediction, and so the score, meaningless
        raise CommandError(f"{', '.join(broken)} came out NaN or infinite on the {len(split)} dev rows: the adapter "
                           "set or the backbone overflowed, so no score is reported; train the adapter set again (a "
                           "lower learning rate)", FAILED)
    print(f"{task.metric} {metrics[task.metric]:.4f} on {len(split)} dev rows")
    print(json.dumps({"task": task.name, "metrics": metrics, "toy_data": split.is_toy, "status": "complete"},
                     allow_nan=False))
    return OK


# --------------------------------------------------------------------------------------------------
# sweep
# --------------------------------------------------------------------------------------------------


def _parse_seeds(text: str) -> list[int]:
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise CommandError(f"--seeds must be comma-separated integers, e.g. 0,1,2; got {text!r}", USAGE) from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise CommandError(f"--seeds needs distinct integers >= 0, e.g. 0,1,2; got {text!r}", USAGE)
    return seeds


def sweep_command(args) -> int:
    """`adapterlab sweep`: the shard's share of a grid of settings x seeds, each run stored as it finishes;
    prints every run and then each setting's mean and spread over the seeds."""
    from .runs.store import ignored_settings, summarize
    from .runs.sweep import expand, parse_grid, parse_shard, run_sweep
    from .training import TrainConfig
    from .training.data import check_glue_setting, get_task

    task = get_task(args.task).name
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    _check_sizes(args)
    seeds = _parse_seeds(args.seeds)
    with usage_errors():
        base = _training_config(args, progress=False)
        grid = parse_grid(args.grid, TrainConfig)
        configs = expand(base, grid, seeds)
        shard = parse_shard(args.shard)
        check_glue_setting(args.data, task)
        stores, own = _run_stores(args.store)
        stores[0].check_writable()  # a store that cannot take the runs is found now, not after training
    ignored = [name for name in grid if name in ignored_settings(base.method)]
    if ignored:
        print(f"adapterlab sweep: --method {base.method} does not read {', '.join(ignored)}: its values there are "
              "one run, not several", file=sys.stderr)
    done = []
    try:
        run_sweep(task, configs, stores=stores, shard=shard, backbone=args.backbone, data_dir=args.data,
                  max_train=args.max_train, max_eval=args.max_eval, progress=args.progress, on_run=done.append)
    except KeyboardInterrupt:
        print(f"adapterlab sweep: {_stopped()} after {len(done)} of this shard's runs; they are stored in {own} "
              "(the run it cut short is not). Run the same command again to resume.", file=sys.stderr)
        return INTERRUPTED
    names = tuple(grid)
    for lookup in done:
        record = lookup.record
        key = record["key"]
        settings = ", ".join(f"{name}={key['settings'].get(name, key.get(name))}" for name in names)
        score = ("diverged" if record.get("status") == "diverged" else f"{record['metric']} {record['best_metric']:.4f}"
                 if isinstance(record.get("best_metric"), (int, float)) else "no metric")
        print(f"seed {record['key']['settings']['seed']}  {settings}  {score}  "
              f"({'stored' if lookup.stored else 'trained'})")
    for row in summarize([lookup.record for lookup in done], by=names):
        settings = ", ".join(f"{name}={row[name]}" for name in names) or "all runs"
        diverged = f", {row['diverged']} diverged" if row["diverged"] else ""
        spread = f"± {row['std']:.4f} (sample sd over {row['n']} seeds" if row["n"] > 1 else f"({row['n']} seed: no spread"
        print(f"{settings}: mean {row['mean']:.4f} {spread}{diverged})")
    precisions = " and ".join(sorted({lookup.record["key"]["precision"] for lookup in done}))
    print(f"{len(done)} runs of shard {shard[0]}/{shard[1]} ({sum(not l.stored for l in done)} trained now) "
          f"in {precisions or 'no precision'}, in the run store {own}")
    return OK


# --------------------------------------------------------------------------------------------------
# ablate
# --------------------------------------------------------------------------------------------------


def tune_command(args) -> int:
    """`adapterlab tune`: this shard's share of the tuning protocol (:mod:`adapterlab.runs.tuning`), then the
    table of selected rates and dev scores."""
    from .runs import tuning
    from .runs.sweep import parse_shard
    from .training.data import check_glue_setting, get_task

    task = get_task(args.task).name
    if task not in tuning.PROTOCOLS:
        raise CommandError(f"--task {task}: no tuning protocol for it; the tasks with one are "
                           f"{', '.join(tuning.PROTOCOLS)}", USAGE)
    with usage_errors():
        shard = parse_shard(args.shard)
        check_glue_setting(args.data, task)
        stores, own = _run_stores(args.store)
        points = tuning.POINTS
        if args.points is not None:
            wanted = [label.strip() for label in args.points.split(",")]
            known = {point.label: point for point in tuning.POINTS}
            unknown = [label for label in wanted if label not in known]
            if unknown:
                raise ValueError(f"--points: no point {unknown[0]!r}; the points are {', '.join(known)}")
            needed = set(wanted) | {known[label].near for label in wanted if known[label].near}
            points = tuple(point for point in tuning.POINTS if point.label in needed)
        _check_validation_rows(task, tuning.PROTOCOLS[task].validation_rows, args.data)
        if not args.report:
            stores[0].check_writable()  # before anything trains, not after the first run
    command = tuning.continue_command(task, points=points, backbone=args.backbone, data_dir=args.data,
                                      store=args.store)
    if not args.report:
        try:
            tuning.run_protocol(task, stores=stores, shard=shard, backbone=args.backbone, data_dir=args.data,
                                points=points)
        except KeyboardInterrupt:
            print(f"adapterlab tune: interrupted; the runs finished are stored in {own}. Run `{command}` "
                  "again to resume.", file=sys.stderr)
            return INTERRUPTED
    rows = tuning.tuned_rows(task, stores, args.backbone, args.data, points)
    print(tuning.tuned_table(rows, task))
    print(tuning.tuned_claim_table(rows))
    sizes = [row for row in rows if row["method"] == "houlsby"]
    if len(sizes) > 1:
        print(tuning.knee(sorted(sizes, key=lambda row: row["seed_row"].config.bottleneck))[1])
    if all(label in {point.label for point in points} for label in tuning.BUDGET_POINTS):
        budget = tuning.budget_rows(task, stores, args.backbone, args.data)
        print(tuning.budget_table(budget, task))
        print(tuning.budget_verdict_table(budget))
    print(tuning.progress(task, tuning.stored_lookup(task, stores, args.backbone, args.data), points, command))
    return OK


def _check_validation_rows(task: str, rows: int, data_dir) -> None:
    """Raise a ValueError saying what to do when the task's training split cannot spare the protocol's
    validation rows (the toy data, a cut-down copy): the protocol fixes the count, so only more data helps."""
    from .training.data import carve_validation, load_split

    train = load_split(task, "train", data_dir)
    try:
        carve_validation(train, rows)
    except ValueError:
        raise ValueError(f"the {task} protocol sets {rows:,} training rows aside to select on, more than the "
                         f"{len(train):,} rows of {train.source} can spare: pass --data DIR (or set $ADAPTERLAB_DATA) "
                         f"to the GLUE data, whose whole {task} training split has room for them") from None


def ablate_command(args) -> int:
    """`adapterlab ablate`: a span ablation per seed (lab 8), each stored as it finishes; prints each seed's
    full and all-off scores, then their mean and spread."""
    from .runs.ablation_runs import run_ablations, summarize_ablations
    from .training.data import check_glue_setting, get_task

    task = get_task(args.task).name
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    _check_rows("--eval-rows", args.eval_rows)
    seeds = _parse_seeds(args.seeds)
    _check_sizes(args)
    with usage_errors():
        config = _training_config(args, progress=False)
        check_glue_setting(args.data, task)
        stores, own = _run_stores(args.store)
        stores[0].check_writable()
    done = []

    def report(lookup):
        done.append(lookup)
        stored = lookup.record["ablation"]
        print(f"seed {lookup.record['key']['settings']['seed']}  {stored['metric']}: all adapters on "
              f"{stored['full']:.4f}, all off {stored['scores'][0][-1]:.4f}, majority class {stored['majority']:.4f}  "
              f"({'stored' if lookup.stored else 'computed'})", flush=True)

    try:
        run_ablations(task, config, seeds, args.eval_rows, stores=stores, on_run=report, backbone=args.backbone,
                      data_dir=args.data, max_train=args.max_train, max_eval=args.max_eval,
                      progress=args.progress)
    except KeyboardInterrupt:
        print(f"adapterlab ablate: {_stopped()} after {len(done)} of {len(seeds)} seeds; they are stored in {own}. "
              "Run the same command again to resume.", file=sys.stderr)
        return INTERRUPTED
    if len(done) > 1:
        summary = summarize_ablations([lookup.record for lookup in done])
        print(f"mean ± sample sd over {len(done)} seeds: all adapters on {summary.full.mean():.4f} ± "
              f"{summary.full.std(ddof=1):.4f}, all off {summary.all_removed.mean():.4f} ± "
              f"{summary.all_removed.std(ddof=1):.4f}")
    print(f"{len(done)} span ablations ({sum(not l.stored for l in done)} computed now) in the run store {own}")
    return OK


# --------------------------------------------------------------------------------------------------
# slides, doctor, count, student
# --------------------------------------------------------------------------------------------------


def slides_command(args) -> int:
    """`adapterlab slides [LAB ...] [--out DIR]`: one offline reveal.js deck per lab."""
    from .teaching.instructor.labfiles import LabNotFoundError
    from .teaching.instructor.slides import OutputFolderError, export_slides

    try:
        decks = export_slides(args.labs or None, args.out, pdf=getattr(args, "pdf", False),
                              contact_sheet=getattr(args, "contact_sheet", False))
    except (LabNotFoundError, OutputFolderError) as error:
        for line in getattr(error, "details", ()):  # a line per file that failed, above the summary
            print(f"  {line}", file=sys.stderr)
        raise CommandError(str(error), USAGE) from None
    for deck in decks:
        print(deck)
    slides = [path for path in decks if path.name.endswith(".slides.html")]
    pdfs = [path for path in decks if path.suffix == ".pdf"]
    sheets = [path for path in decks if path.name.endswith(".contact.png")]
    counted = f"{len(slides)} slide deck{'s' if len(slides) != 1 else ''}"
    if pdfs:
        counted += f", {len(pdfs)} PDF{'s' if len(pdfs) != 1 else ''}"
    if sheets:
        counted += f", {len(sheets)} contact sheet{'s' if len(sheets) != 1 else ''}"
    print(f"{counted} in {Path(args.out)}: open a deck in a browser, no network needed (keep lib/ beside them)")
    return OK


def doctor_command(args) -> int:
    from .doctor import run_doctor

    return run_doctor()


def count_command(args) -> int:
    """`adapterlab count`: lab 4's closed-form counts beside a module count of the real model (table or
    JSON), for adapters or, with --method, for LoRA or BitFit; exits 1 when a row does not match."""
    import dataclasses
    import json

    from .methods.counts import compare_method_counts
    from .model.counting import compare_counts, format_count_rows

    _check_sizes(args)
    if args.method is not None:
        with usage_errors():
            own = {name: getattr(args, name) for name in methods.get(args.method).settings if hasattr(args, name)}
            own.pop("train_pooler", None)
            rows = compare_method_counts(args.backbone, args.method, args.num_labels, args.train_pooler, **own)
        shown = "".join(f", {name}={value}" for name, value in own.items())
        print(json.dumps([dataclasses.asdict(row) | {"match": row.match} for row in rows], indent=2) if args.json
              else format_count_rows(f"{args.backbone}: {args.method}{shown}, {args.num_labels} labels", rows))
        if not all(row.match for row in rows):
            raise CommandError("a closed-form count differs from the model's count (the rows not marked 'yes' "
                               "above); this is a bug in adapterlab.counting: please report it")
        return OK
    with usage_errors():
        report = compare_counts(args.backbone, args.placement, args.bottleneck, not args.frozen_layernorm,
                                args.num_labels, train_pooler=args.train_pooler)
    print(json.dumps(report.as_dict(), indent=2) if args.json else report)
    if not report.all_match:
        raise CommandError("a closed-form count differs from the model's count (the rows not marked 'yes' above); "
                           "this is a bug in adapterlab.counting: please report it")
    return OK


def student_command(args) -> int:
    from .teaching.instructor.student import student_command as student

    return student(args)


def course_command(args) -> int:
    from .teaching.instructor.course import course_command as course

    return course(args)


# --------------------------------------------------------------------------------------------------
# export, import
# --------------------------------------------------------------------------------------------------


def _add_interop_commands(commands) -> None:
    """`export` and `import`: adapter sets to and from AdapterHub and PEFT (:mod:`adapterlab.interop`)."""
    from .interop.convert import TARGETS

    export = commands.add_parser(
        "export", help="write a run's adapter set as a folder AdapterHub (adapters) or PEFT loads",
        description="Houlsby, Pfeiffer and parallel adapters go to AdapterHub (DoubleSeqBn, SeqBn, ParBn; "
                    "model.load_adapter(DIR, use_safetensors=True, set_active=True)), LoRA to PEFT "
                    "(PeftModel.from_pretrained(base, DIR)) or, on query and value only, to AdapterHub's LoRAConfig; "
                    "the classifier head goes with them, safetensors only.")
    export.add_argument("run", metavar="RUN_FOLDER", help="a folder written by `adapterlab train`")
    export.add_argument("--to", required=True, choices=list(TARGETS), help="the library whose format to write")
    export.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder")
    export.add_argument("--name", default=None, help="the adapter's name in AdapterHub (default: the task, own-... written own_...)")
    export.add_argument("--backbone-tensors", action="store_true",
                        help="AdapterHub: write trained LayerNorms beside the adapter, in "
                             "trained_backbone.safetensors (AdapterHub's adapters have no place for them; loading them "
                             "is a step of its own). A trained pooler goes as AdapterHub's classification head anyway")
    export.add_argument("--overwrite", action="store_true", help="replace what --out holds")
    imp = commands.add_parser(
        "import", help="read an AdapterHub or PEFT folder into an adapter set that `evaluate` loads",
        description="A folder whose adapter computes what no adapterlab method computes is refused, never loaded "
                    "approximately.")
    imp.add_argument("folder", metavar="DIR", help="a folder saved by AdapterHub (save_adapter(..., with_head=True, "
                                                   "use_safetensors=True)) or PEFT (save_pretrained), or exported here")
    imp.add_argument("--out", required=True, metavar="RUN_FOLDER", help="a new or empty folder for the adapter set")
    imp.add_argument("--backbone", default=None, help="default: the base model the folder records")
    imp.add_argument("--task", default=None, help="the task its classifier was trained on (default: what the folder says)")
    imp.add_argument("--overwrite", action="store_true", help="replace what --out holds")


def export_command(args) -> int:
    """`adapterlab export`: a run's adapter set as a folder AdapterHub or PEFT loads with its own API."""
    from .interop.convert import LIBRARIES, InteropError, export_set, load_code
    from .runs.folder import RunFolderError

    try:
        out = export_set(args.run, args.to, args.out, name=args.name, backbone_tensors=args.backbone_tensors,
                         overwrite=args.overwrite)
    except (InteropError, RunFolderError) as error:
        raise CommandError(str(error), USAGE) from None
    print(f"wrote {out}: load it in {LIBRARIES[args.to]} with (also in its README.md):")
    print("\n".join(f"    {line}" for line in load_code(out)))
    return OK


def import_command(args) -> int:
    """`adapterlab import`: a library's folder as an adapter set `evaluate` and the labs load."""
    from .interop.convert import InteropError, import_set
    from .runs.folder import RunFolderError

    try:
        out, summary = import_set(args.folder, args.out, backbone=args.backbone, task=args.task,
                                  overwrite=args.overwrite)
    except (InteropError, RunFolderError) as error:
        raise CommandError(str(error), USAGE) from None
    print(f"imported {summary['kind']} {summary['method']} for {summary['task']} on {summary['backbone']} into {out}: "
          f"adapterlab evaluate --checkpoint {out}")
    for note in summary.get("notes", []):
        print(f"note: {note}")
    return OK



COMMANDS = {"doctor": doctor_command, "count": count_command, "train": train_command,
            "evaluate": evaluate_command, "sweep": sweep_command, "tune": tune_command, "ablate": ablate_command, "slides": slides_command,
            "student": student_command, "course": course_command, "export": export_command, "import": import_command}


def _report(command: str, message) -> None:
    """The one error line: ``adapterlab COMMAND: message`` on stderr."""
    print(_line(command, message), file=sys.stderr)


def _line(command: str, message) -> str:
    """``adapterlab COMMAND: message`` on one line, however many the message had."""
    return f"adapterlab {command + ': ' if command else ''}{' '.join(str(message).split())}"


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand and return its exit code (0 ok, 1 failed, 2 usage, 130 interrupted)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # --help has printed its text
        return exit.code if isinstance(exit.code, int) else USAGE
    with _sigterm_as_ctrl_c(), _warnings_as_lines(args.command):
        try:
            return COMMANDS[args.command](args)
        except CommandError as error:
            _report(args.command, error)
            return error.code
        except KeyboardInterrupt:
            _report(args.command, f"{_stopped()} before any result was written")
            return INTERRUPTED
        except OSError as error:  # a file met while working: what failed and why, in one plain sentence
            _report(args.command, _os_error_message(error))
            return FAILED
        except (ValueError, RecursionError) as error:  # bad data met while working: the message names it
            _report(args.command, error)
            return FAILED


@contextlib.contextmanager
def _sigterm_as_ctrl_c():
    """While a command runs, SIGTERM is handled as Ctrl-C (:func:`_terminate_like_ctrl_c`)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or not hasattr(signal, "SIGTERM"):
        yield
        return
    _STOPPED_BY.clear()
    previous = signal.signal(signal.SIGTERM, _terminate_like_ctrl_c)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _warnings_as_lines(command: str):
    """While a command runs, a warning prints as one line in the errors' style (``adapterlab COMMAND: warning:
    ...``), not as Python's two lines naming the source line that raised it."""
    import warnings

    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, *details: f"{_line(command, f'warning: {message}')}\n"
    try:
        yield
    finally:
        warnings.formatwarning = previous


def _os_error_message(error: OSError) -> str:
    """"writing runs/x/metrics.json failed: the disk is full", not "[Errno 28] No space left on device"."""
    from .runs.folder import os_error_reason

    where = " and ".join(repr(str(name)) for name in (error.filename, error.filename2) if name)
    if error.errno is None:
        return str(error)
    return (f"{where + ': ' if where else ''}{os_error_reason(error)}; free space, fix the permissions or choose "
            "another folder, then run the command again")


if __name__ == "__main__":
    sys.exit(main())
