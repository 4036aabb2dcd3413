"""Seconds per training cell of labs 6-9 in the student profile with bert-base-uncased, from measured costs.

bert-base-uncased is not on this machine; the BERT-base shape with random weights (``bert-base-random``) costs
the same per step and per evaluation, so it stands in for the timing (never for accuracy). Measured: seconds
per training step of every (task, method) a cell trains (adapters at r = 64; lab 7's r = 256 run does about 8 % more
multiply-adds per step, its r = 8 run 2 % fewer), in the real loop at the profile's batch size, over length-grouped batches of
train rows spread evenly over the sentence lengths, so that a few batches cost what an epoch's batches cost
on average; and seconds per evaluation of every dev set a cell scores. A cell's time is then the sum over its
runs of steps x s/step + evaluations x s/eval (loading and tokenising, a few seconds, left out). The cells
are those of the notebooks as committed, with the sizes of the student profile for bert-base-uncased
(``adapterlab.profiles``).

Target: every training cell within 5 minutes on a 4-core laptop. This machine has 2 cores, so a cell that
fits in 300 s here fits there too; the check uses this machine's seconds.

    python benchmarks/lab_budget.py            # about 5 minutes on 2 cores
    python benchmarks/lab_budget.py --quick    # smoke run on the stand-in, a few steps
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import statistics
import sys
import time

import common
from adapterlab.ablation import span_ablation
from adapterlab.backbones import BERT_BASE_RANDOM, STANDIN, load_backbone
from adapterlab.data import load_split, tokenize
from adapterlab.placement import apply_method, encoder_layers
from adapterlab.profiles import get_profile
from adapterlab.training import TrainConfig, evaluate, train

BUDGET_SECONDS = 300.0
#: Measured steps per (task, method); the first WARMUP are run but not timed.
STEPS, WARMUP = 24, 3


def evaluations(steps: int, every: int) -> int:
    """Evaluations of a run: every ``every`` steps, and at the end unless that was one of them."""
    return steps // every + (1 if steps % every else 0)


def cells(profile, num_layers: int) -> list[dict]:
    """Each training cell of labs 6-9: (task, method, steps) runs with their evaluations, as the notebooks
    call them. ``evals`` counts evaluations of the full dev set; ``ablation`` those of the span ablation."""
    s, sweep = profile.steps, profile.sweep_steps
    lab_evals = evaluations(s, profile.eval_every)  # labs 6 and 8

    def panel_evals(steps):  # the panel: every panel_eval_every steps, else halfway and at the end
        return evaluations(steps, profile.panel_eval_every or max(steps // 2, 1))

    small = [x for x in profile.sweep_init_scales if x <= 1e-2 and x != 1e-2]  # 1e-2 is the recorded run
    large = [x for x in profile.sweep_init_scales if x > 1e-2]
    sizes = [r for r in profile.sweep_bottlenecks if r != 64]  # r = 64 is the recorded run
    spans = num_layers * (num_layers + 1) // 2 + 1
    return [
        {"cell": "lab 6: Houlsby adapters", "runs": [("sst2", "houlsby", s, lab_evals)]},
        {"cell": "lab 6: head only", "runs": [("sst2", "head", s, lab_evals)]},
        {"cell": "lab 6: full fine-tuning", "runs": [("sst2", "full", s, lab_evals)]},
        {"cell": "lab 6: placement sweep", "runs": [("sst2", m, sweep, panel_evals(sweep))
                                                   for m in ("houlsby", "pfeiffer", "parallel", "head")]},
        {"cell": "lab 7: Houlsby adapters", "runs": [("cola", "houlsby", s, panel_evals(s))]},
        {"cell": "lab 7: init scales <= 1e-2", "runs": [("cola", "houlsby", s, panel_evals(s))] * len(small)},
        {"cell": "lab 7: init scales > 1e-2", "runs": [("cola", "houlsby", s, panel_evals(s))] * len(large)},
        {"cell": "lab 7: bottleneck sweep", "runs": [("cola", "houlsby", s, panel_evals(s))] * len(sizes)},
        {"cell": "lab 8: Houlsby adapters", "runs": [("sst2", "houlsby", s, lab_evals)]},
        {"cell": "lab 8: span ablation", "runs": [], "ablation": spans},
        {"cell": "lab 9: adapters for SST-2", "runs": [("sst2", "houlsby", s, 1)]},
        {"cell": "lab 9: adapters for CoLA", "runs": [("cola", "houlsby", s, 1)]},
    ]


def length_spread(split, rows: int):
    """``rows`` rows of ``split`` spread evenly over its sentence lengths (in characters). Cut into
    length-grouped batches, they cost per step what the batches of a whole epoch cost on average; a few
    batches taken at random from the epoch would not (their lengths vary several-fold)."""
    order = sorted(range(len(split)), key=lambda i: len(str(split.texts[i])))
    picks = [order[round(k * (len(order) - 1) / (rows - 1))] for k in range(rows)]
    return dataclasses.replace(split, texts=[split.texts[i] for i in picks], labels=[split.labels[i] for i in picks],
                               total_rows=len(split), subset="spread evenly over the sentence lengths")


def seconds_per_step(model, tokens, method: str, batch_size: int, steps: int, warmup: int) -> float:
    """Seconds of one training step in the real loop: (time of ``steps`` steps - time of the first
    ``warmup``) / (steps - warmup), both runs from the same start and the same batches, so the first
    steps' one-off costs cancel."""
    times = {}
    for n in (warmup, steps):
        prepared = copy.deepcopy(model)
        apply_method(prepared, method, bottleneck=64)
        config = TrainConfig(method=method, max_steps=n, batch_size=batch_size, progress=False, device="cpu",
                             precision="fp32")  # the budget holds on a CPU without fast bf16
        times[n] = train(prepared, tokens, None, config).train_seconds
    return (times[steps] - times[warmup]) / (steps - warmup)


def seconds_per_eval(model, tokens, batch_size: int = 128, repeats: int = 2) -> float:
    """Median seconds of one evaluation of ``tokens`` (batch 128, as the training loop evaluates)."""
    prepared = copy.deepcopy(model)
    apply_method(prepared, "houlsby", bottleneck=64)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        evaluate(prepared, tokens, batch_size=batch_size)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    common.set_threads(args)
    data_dir = common.glue_dir(args.data)
    profile = get_profile("student")
    backbone = STANDIN if args.quick else BERT_BASE_RANDOM
    steps, warmup = (4, 2) if args.quick else (STEPS, WARMUP)
    model, tokenizer, info = load_backbone(backbone, seed=profile.seed)
    num_layers = len(encoder_layers(model))
    plan = cells(profile, num_layers)
    needed = {(task, method) for cell in plan for task, method, _, _ in cell["runs"]}
    limit = 256 if args.quick else None
    tokens = {}
    for task in ("sst2", "cola"):
        train_split = load_split(task, "train", data_dir=data_dir, max_examples=limit, seed=profile.seed)
        tokens[task, "train"] = tokenize(length_spread(train_split, steps * profile.batch_size), tokenizer)
        tokens[task, "dev"] = tokenize(load_split(task, "dev", data_dir=data_dir, max_examples=limit,
                                                  seed=profile.seed), tokenizer)
    ablation = tokenize(load_split("sst2", "dev", data_dir=data_dir, max_examples=profile.ablation_eval,
                                   seed=profile.seed), tokenizer)
    step_cost, eval_cost = {}, {}
    for task, method in sorted(needed):
        step_cost[task, method] = seconds_per_step(model, tokens[task, "train"], method, profile.batch_size,
                                                   steps, warmup)
        print(f"  {task} {method}: {step_cost[task, method]:.3f} s per step", flush=True)
    for task in ("sst2", "cola"):
        eval_cost[task] = seconds_per_eval(model, tokens[task, "dev"])
        print(f"  {task} dev ({len(tokens[task, 'dev'])} rows): {eval_cost[task]:.1f} s per evaluation", flush=True)
    ablation_batch = inspect.signature(span_ablation).parameters["batch_size"].default
    ablation_cost = seconds_per_eval(model, ablation, batch_size=ablation_batch)
    rows = []
    for cell in plan:
        train_s = sum(n * step_cost[task, method] for task, method, n, _ in cell["runs"])
        eval_s = sum(evals * eval_cost[task] for task, _, _, evals in cell["runs"])
        eval_s += cell.get("ablation", 0) * ablation_cost
        rows.append({"cell": cell["cell"], "runs": len(cell["runs"]),
                     "steps": sum(n for _, _, n, _ in cell["runs"]), "train_s": train_s, "eval_s": eval_s,
                     "total_s": train_s + eval_s, "within_budget": train_s + eval_s <= BUDGET_SECONDS})
    payload = {
        "benchmark": "lab_budget", "machine": common.machine(), "backbone": info.describe(), "quick": args.quick,
        "profile": dict(profile.as_rows()), "budget_seconds": BUDGET_SECONDS,
        "seconds_per_step": [{"task": t, "method": m, "seconds": v} for (t, m), v in sorted(step_cost.items())],
        "seconds_per_eval": {**{f"{t} dev": v for t, v in eval_cost.items()},
                             f"sst2 dev, {len(ablation)} rows (span ablation)": ablation_cost},
        "cells": rows,
    }
    payload["target"] = {"target": f"every training cell <= {BUDGET_SECONDS:.0f} s on this 2-core machine "
                                   "(so within 5 minutes on a 4-core laptop)",
                         "slowest": max(rows, key=lambda r: r["total_s"])["cell"],
                         "met": all(r["within_budget"] for r in rows)}
    sizes = (f"student profile sized for {profile.sized_for}: {profile.steps} steps per run, "
             f"{profile.sweep_steps} per placement-sweep run, batch {profile.batch_size}")
    return common.publish("lab_budget", args, payload, report(payload, sizes))


def report(payload: dict, sizes: str) -> str:
    table = common.table(payload["cells"], [
        ("cell", "cell", ""), ("runs", "runs", "d"), ("steps", "steps", "d"), ("train_s", "training s", ".0f"),
        ("eval_s", "evaluation s", ".0f"), ("total_s", "cell s", ".0f")])
    target = payload["target"]
    verdict = "MET" if target["met"] else "MISSED"
    return "\n".join([common.machine_line(payload["machine"]), f"{payload['backbone']}; {sizes}", "", table, "",
                      f"[{verdict}] {target['target']}; slowest: {target['slowest']}"])

if __name__ == "__main__":
    sys.exit(main())
