"""`adapterlab ...` / `python -m adapterlab ...`: the command line.

This module owns what every subcommand shares: parsing, checking the arguments before anything slow
starts, and reporting. The work itself is done by the modules the labs use (training, evaluation,
slides, ...).

One error style: a single line ``adapterlab COMMAND: message`` on stderr that says what to do.
One exit-code policy:

* 0  the command did what was asked;
* 1  it failed while working (training diverged, a data file or notebook is damaged, a write failed);
* 2  usage: an argument is wrong (a bad value, a missing folder, a non-empty ``--out``); nothing was done;
* 130  interrupted (Ctrl-C). ``train`` still writes the run it has so far (marked "interrupted").
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from .data import TASKS
from .lora_model import DEFAULT_LORA_ALPHA, DEFAULT_LORA_RANK, LORA_TARGET_SETS
from .placement import METHODS, PLACEMENTS
from .precision import PRECISIONS

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


def _add_method_options(parser: argparse.ArgumentParser) -> None:
    """The options of --method lora, and the pooler switch every method but full reads (train and sweep)."""
    parser.add_argument("--rank", type=int, default=DEFAULT_LORA_RANK, help="LoRA rank r (--method lora)")
    parser.add_argument("--lora-alpha", type=float, default=DEFAULT_LORA_ALPHA,
                        help="LoRA scaling alpha: the update is alpha/r·BA (--method lora)")
    parser.add_argument("--lora-targets", default="query_value", choices=list(LORA_TARGET_SETS),
                        help="the dense layers LoRA adapts: attention query and value, or every dense layer")
    parser.add_argument("--train-pooler", action="store_true",
                        help="train the pretrained pooler too (frozen by default, as in the original adapter code)")


def _method_settings(args) -> dict:
    """The TrainConfig fields _add_method_options sets."""
    return dict(lora_rank=args.rank, lora_alpha=args.lora_alpha, lora_targets=args.lora_targets,
                train_pooler=args.train_pooler)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adapterlab", description="A teaching lab on bottleneck adapters.",
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
    count.add_argument("--method", default=None, choices=["lora", "bitfit"],
                       help="count LoRA (--rank, --lora-targets) or BitFit instead of adapters")
    count.add_argument("--rank", type=int, default=DEFAULT_LORA_RANK, help="LoRA rank r (--method lora)")
    count.add_argument("--lora-targets", default="query_value", choices=list(LORA_TARGET_SETS),
                       help="the dense layers LoRA adapts (--method lora)")
    count.add_argument("--train-pooler", action="store_true", help="count the pretrained pooler as trained")
    count.add_argument("--json", action="store_true", help="machine-readable output")

    train = commands.add_parser("train", help="train one method on a GLUE task; write the adapter set and metrics.json")
    train.add_argument("--task", default="sst2", choices=tasks)
    train.add_argument("--method", default="houlsby", choices=METHODS)
    train.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r (adapter methods)")
    train.add_argument("--top-k", type=int, default=2, help="layers trained by --method top_k")
    _add_method_options(train)
    train.add_argument("--backbone", default="bert-base-uncased",
                       help="bert-base-uncased (offline: the stand-in), all-MiniLM-L6-v2, bert-base-random, tiny-random")
    train.add_argument("--data", default=None, metavar="DIR",
                       help="a GLUE folder (default: $ADAPTERLAB_DATA, then the hub, then the toy sets)")
    train.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    train.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    train.add_argument("--epochs", type=float, default=1.0)
    train.add_argument("--lr", type=float, default=None,
                       help="peak learning rate (default: 1e-3 for adapters, layernorm, head, bitfit; 5e-4 for lora; "
                            "5e-5 for full, top_k)")
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", required=True, metavar="DIR",
                       help="a new or empty folder for the run: metrics.json and, for adapters, lora and bitfit, "
                            "the trained set")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run already in --out (only once the new run is written)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.add_argument("--precision", default="auto", choices=PRECISIONS,
                       help="auto (default): bf16 autocast where a short probe, cached per machine, finds it at least "
                            "1.2x faster, else fp32; fp32 or bf16 force it. Evaluation runs in fp32")

    evaluate = commands.add_parser("evaluate", help="evaluate a saved adapter set on its task's dev set")
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="a folder written by `adapterlab train`")
    evaluate.add_argument("--task", default=None, choices=tasks, help="must be the task the set was trained on")
    evaluate.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    evaluate.add_argument("--backbone", default=None, help="default: the backbone the adapter set was trained on")
    evaluate.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")

    sweep = commands.add_parser(
        "sweep", help="train a grid of settings x seeds into the run store; shards split it, a rerun resumes it",
        description="Every combination of the --grid values, for every seed, is trained once and stored in the run "
                    "store; runs already stored (by any shard, or an earlier interrupted sweep) are not trained again.")
    sweep.add_argument("--task", default="sst2", choices=tasks)
    sweep.add_argument("--method", default="houlsby", choices=METHODS)
    sweep.add_argument("--grid", action="append", default=[], metavar="NAME=V1,V2,...",
                       help="a training setting and its values, e.g. --grid init_scale=1e-4,1e-2 --grid bottleneck=8,64 "
                            "(any TrainConfig field; repeat for a grid)")
    sweep.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    sweep.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r where the grid does not set it")
    sweep.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the method's)")
    _add_method_options(sweep)
    sweep.add_argument("--steps", type=int, default=None, help="training steps per run (default: --epochs)")
    sweep.add_argument("--epochs", type=float, default=1.0)
    sweep.add_argument("--eval-every", type=int, default=None, metavar="N", help="evaluate every N steps and at the end")
    sweep.add_argument("--batch-size", type=int, default=32)
    sweep.add_argument("--backbone", default="bert-base-uncased", help="as for train")
    sweep.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    sweep.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    sweep.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    sweep.add_argument("--shard", default="1/1", metavar="I/N",
                       help="run the I-th of N shares of the grid (1/2 and 2/2 in two processes or machines)")
    sweep.add_argument("--store", default=None, metavar="DIR",
                       help="the run store (default: $ADAPTERLAB_RUNS, else runs/store in the project)")
    sweep.add_argument("--no-progress", action="store_true", help="no progress bar")
    sweep.add_argument("--precision", default="fp32", choices=PRECISIONS,
                       help="fp32 (default: the reference runs' precision, and the same on every shard's machine), "
                            "bf16, or auto (bf16 where a cached probe finds it at least 1.2x faster)")

    ablate = commands.add_parser(
        "ablate", help="train a run per seed and store its span ablation (lab 8); a rerun skips stored seeds",
        description="For every seed: train the run (Houlsby adapters unless --method says otherwise), switch its "
                    "adapters off span by span on --eval-rows dev rows, and store the score matrix in the run store.")
    ablate.add_argument("--task", default="sst2", choices=tasks)
    ablate.add_argument("--method", default="houlsby", choices=PLACEMENTS, help="an adapter placement")
    ablate.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (default: 0,1,2)")
    ablate.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r")
    ablate.add_argument("--init-scale", type=float, default=1e-2, help="adapter init scale sigma")
    ablate.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the method's)")
    ablate.add_argument("--steps", type=int, default=None, help="training steps per run (default: --epochs)")
    ablate.add_argument("--epochs", type=float, default=1.0)
    ablate.add_argument("--eval-every", type=int, default=None, metavar="N", help="evaluate every N steps and at the end")
    ablate.add_argument("--batch-size", type=int, default=32)
    ablate.add_argument("--train-pooler", action="store_true",
                        help="train the pretrained pooler too (frozen by default, as in the original adapter code)")
    ablate.add_argument("--eval-rows", type=int, default=300, metavar="N", help="dev rows scored per span (default: 300)")
    ablate.add_argument("--precision", default="fp32", choices=PRECISIONS,
                        help="fp32 (default: the reference runs' precision), bf16, or auto (as for sweep)")
    ablate.add_argument("--backbone", default="bert-base-uncased", help="as for train")
    ablate.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    ablate.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    ablate.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate training on N dev rows")
    ablate.add_argument("--store", default=None, metavar="DIR",
                        help="the run store (default: $ADAPTERLAB_RUNS, else runs/store in the project)")
    ablate.add_argument("--no-progress", action="store_true", help="no progress bar")

    slides = commands.add_parser("slides", help="export the labs to reveal.js slide decks that open offline")
    slides.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    slides.add_argument("--out", default="build/slides", help="folder for the decks (default: build/slides)")
    slides.add_argument("--pdf", action="store_true", help="also print each deck to a PDF, one page per slide (needs Chromium)")

    student = commands.add_parser("student", help="write student copies of the labs, solutions stubbed out")
    student.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    student.add_argument("--out", default="build/student", help="folder for the copies (default: build/student)")
    return parser


# --------------------------------------------------------------------------------------------------
# train
# --------------------------------------------------------------------------------------------------


def _run_stores(folder) -> tuple[list, object]:
    """The stores a sweep or ablation reads (``--store`` alone, else the defaults) and the folder its new runs
    go to, as it prints: relative to the project (runs/store), not as an absolute path."""
    from .runstore import PROJECT_ROOT, RunStore, default_stores

    stores = default_stores() if folder is None else [RunStore(folder)]
    own = stores[0].folder
    with contextlib.suppress(ValueError):
        own = own.relative_to(PROJECT_ROOT)
    return stores, own


def _check_rows(flag: str, value: int | None) -> None:
    if value is not None and value < 1:
        raise CommandError(f"{flag} must be a number of rows >= 1; got {value}", USAGE)


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
    from .checkpoints import SAVED_METHODS, save_adapter_set
    from .data import check_glue_setting, get_task
    from .run_folder import commit_run_folder, discard_staging, prepare_run_folder, write_metrics
    from .training import TrainConfig, TrainingDiverged, run_experiment

    task = get_task(args.task).name
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    with usage_errors():
        config = TrainConfig(method=args.method, bottleneck=args.bottleneck, top_k=args.top_k, **_method_settings(args),
                             learning_rate=args.lr,
                             epochs=args.epochs, batch_size=args.batch_size, seed=args.seed,
                             progress=not args.no_progress, precision=args.precision)
        check_glue_setting(args.data, task)
        staging = prepare_run_folder(args.out, overwrite=args.overwrite)
    out = Path(args.out)
    try:
        result = run_experiment(task, config, backbone=args.backbone, data_dir=args.data,
                                max_train=args.max_train, max_eval=args.max_eval)
        report = {"status": "interrupted" if result.interrupted else "complete", "task": task, **result.to_dict()}
        report["checkpoint"] = str(out) if config.method in SAVED_METHODS else None
        if report["checkpoint"]:
            save_adapter_set(result.model, staging, backbone=result.backbone_info,
                             extra={"task": task, "seed": config.seed, "metrics": result.metrics})
        else:
            report["note"] = f"method {config.method} trains the backbone's own weights: no adapter set is written"
        write_metrics(staging, report)
        commit_run_folder(staging, out)
    except TrainingDiverged as error:
        write_metrics(staging, _diverged_report(task, config, error))
        commit_run_folder(staging, out)
        raise CommandError(f"{error}. The partial history is in {out}/metrics.json") from None
    finally:
        discard_staging(staging)  # a run that failed before it was written; after a commit there is nothing left
    print(result.summary(sources=not config.progress))  # with progress on, run_experiment printed them
    print(f"wrote {out / 'metrics.json'}" + (f" and the adapter set in {out}" if report["checkpoint"] else ""))
    if result.interrupted:
        print(f"adapterlab train: interrupted after {len(result.history.steps)} steps; {out} holds the run so far "
              "(metrics.json says \"interrupted\")", file=sys.stderr)
        return INTERRUPTED
    return OK


# --------------------------------------------------------------------------------------------------
# evaluate
# --------------------------------------------------------------------------------------------------


def evaluate_command(args) -> int:
    """`adapterlab evaluate`: load a run folder's adapter set into its backbone and score it on the dev set
    of the task it was trained on; print the metrics (the last line is JSON)."""
    import json

    from .backbones import load_backbone
    from .checkpoints import load_adapter_set
    from .data import check_glue_setting, get_task, load_split, tokenize
    from .evaluation import evaluate, pick_device
    from .run_folder import adapter_set_config

    _check_rows("--max-eval", args.max_eval)
    with usage_errors():
        manifest = adapter_set_config(args.checkpoint)
        extra = manifest.get("extra") or {}
        trained_on = extra.get("task")
        task = get_task(args.task or trained_on or "sst2")
        if trained_on and task.name != get_task(trained_on).name:
            raise CommandError(f"the adapter set in {args.checkpoint} was trained on {trained_on}, not {task.name}: "
                               f"its classifier head scores {trained_on}'s labels; drop --task or pass --task "
                               f"{trained_on}", USAGE)
        check_glue_setting(args.data, task)
    seed = int(extra.get("seed", 0))  # random backbones are rebuilt from the seed they were trained on
    model, tokenizer, info = load_backbone(args.backbone or manifest["backbone"]["name"],
                                           num_labels=manifest["backbone"]["num_labels"], seed=seed)
    load_adapter_set(model, args.checkpoint)
    split = load_split(task, "dev", args.data, max_examples=args.max_eval, seed=seed)
    metrics = evaluate(model, tokenize(split, tokenizer), device=pick_device("auto"))
    print(info.describe())
    print(f"eval: {split.describe()}")
    print(json.dumps({"task": task.name, "metrics": metrics, "toy_data": split.is_toy}))
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
    from .data import check_glue_setting, get_task
    from .runstore import summarize
    from .sweep import expand, parse_grid, parse_shard, run_sweep
    from .training import TrainConfig

    task = get_task(args.task).name
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    seeds = _parse_seeds(args.seeds)
    with usage_errors():
        base = TrainConfig(method=args.method, bottleneck=args.bottleneck, **_method_settings(args),
                           learning_rate=args.lr, epochs=args.epochs,
                           max_steps=args.steps, eval_every=args.eval_every, batch_size=args.batch_size,
                           progress=False, precision=args.precision)
        grid = parse_grid(args.grid, TrainConfig)
        configs = expand(base, grid, seeds)
        shard = parse_shard(args.shard)
        check_glue_setting(args.data, task)
        stores, own = _run_stores(args.store)
    done = []
    try:
        run_sweep(task, configs, stores=stores, shard=shard, backbone=args.backbone, data_dir=args.data,
                  max_train=args.max_train, max_eval=args.max_eval, progress=not args.no_progress, on_run=done.append)
    except KeyboardInterrupt:
        print(f"adapterlab sweep: interrupted after {len(done)} of this shard's runs; they are stored in {own}. "
              "Run the same command again to resume.", file=sys.stderr)
        return INTERRUPTED
    names = tuple(grid)
    for lookup in done:
        record = lookup.record
        key = record["key"]
        settings = ", ".join(f"{name}={key['settings'].get(name, key.get(name))}" for name in names)
        score = "diverged" if record.get("status") == "diverged" else f"{record['metric']} {record['best_metric']:.4f}"
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


def ablate_command(args) -> int:
    """`adapterlab ablate`: a span ablation per seed (lab 8), each stored as it finishes; prints each seed's
    full and all-off scores, then their mean and spread."""
    from .ablation_runs import run_ablations, summarize_ablations
    from .data import check_glue_setting, get_task
    from .training import TrainConfig

    task = get_task(args.task).name
    _check_rows("--max-train", args.max_train)
    _check_rows("--max-eval", args.max_eval)
    _check_rows("--eval-rows", args.eval_rows)
    seeds = _parse_seeds(args.seeds)
    with usage_errors():
        config = TrainConfig(method=args.method, bottleneck=args.bottleneck, init_scale=args.init_scale,
                             learning_rate=args.lr, epochs=args.epochs, max_steps=args.steps,
                             eval_every=args.eval_every, batch_size=args.batch_size, precision=args.precision,
                             train_pooler=args.train_pooler, progress=False)
        check_glue_setting(args.data, task)
        stores, own = _run_stores(args.store)
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
                      progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"adapterlab ablate: interrupted after {len(done)} of {len(seeds)} seeds; they are stored in {own}. "
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
    from .labfiles import LabNotFoundError
    from .slides import OutputFolderError, export_slides

    try:
        decks = export_slides(args.labs or None, args.out, pdf=getattr(args, "pdf", False))
    except (LabNotFoundError, OutputFolderError) as error:
        raise CommandError(str(error), USAGE) from None
    for deck in decks:
        print(deck)
    slides = [path for path in decks if path.name.endswith(".slides.html")]
    pdfs = [path for path in decks if path.suffix == ".pdf"]
    counted = f"{len(slides)} slide deck{'s' if len(slides) != 1 else ''}"
    if pdfs:
        counted += f" and {len(pdfs)} PDF{'s' if len(pdfs) != 1 else ''}"
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

    from .counting import compare_counts, compare_method_counts, format_count_rows

    if args.method is not None:
        with usage_errors():
            rows = compare_method_counts(args.backbone, args.method, args.rank, args.lora_targets, args.num_labels,
                                         args.train_pooler)
        shown = f", r={args.rank} on {args.lora_targets}" if args.method == "lora" else ""
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
    from .student import student_command as student

    return student(args)


COMMANDS = {"doctor": doctor_command, "count": count_command, "train": train_command,
            "evaluate": evaluate_command, "sweep": sweep_command, "ablate": ablate_command, "slides": slides_command,
            "student": student_command}


def _report(command: str, message) -> None:
    """The one error line: ``adapterlab COMMAND: message`` on stderr."""
    print(f"adapterlab {command}: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand and return its exit code (0 ok, 1 failed, 2 usage, 130 interrupted)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit:  # argparse has printed its usage message; --help exits 0
        return exit.code if isinstance(exit.code, int) else USAGE
    try:
        return COMMANDS[args.command](args)
    except CommandError as error:
        _report(args.command, error)
        return error.code
    except KeyboardInterrupt:
        _report(args.command, "interrupted (Ctrl-C) before any result was written")
        return INTERRUPTED
    except (ValueError, OSError) as error:  # bad data or files met while working: the message names them
        _report(args.command, error)
        return FAILED


if __name__ == "__main__":
    sys.exit(main())
