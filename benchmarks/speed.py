"""Training speed over real SST-2 train batches: examples/s per method and precision, and what length-grouped
batches save.

For each backbone (the offline stand-in and the BERT-base shape with random weights), every method is
prepared once; then the real training loop (``adapterlab.training.train``) runs short bursts of steps for
every (method, order, precision) triple, where the order is length-grouped or plain shuffled batches padded
to their longest row and the precision fp32 or bf16 (autocast around the forward pass, fp32 weights and
optimizer: ``adapterlab.precision``). Each round runs one burst of every triple, in a seeded random order,
all on the same random sample of batches per order (a fresh sample each round), so drift in the machine's
speed hits every triple alike. Reported per method and precision: examples/s over all measured steps (total
examples / total training seconds); the speed-up, the median over rounds of the paired ratio grouped /
shuffled; each method's speed relative to full fine-tuning in the same precision; and bf16's speed relative
to fp32 for the same method (grouped batches), each the median over rounds of the paired ratio. One untimed
burst per method and precision warms up first. The bf16 column tells whether ``precision="auto"`` would pick
bf16 on this machine (at least 1.2x).

The padding waste (padded tokens / real tokens) of a whole SST-2 train epoch is reported for both orders: it
depends on the data and the tokenizer only.

    python benchmarks/speed.py                  # both backbones, both precisions (about 20-30 min on 2 cores)
    python benchmarks/speed.py --backbone all-MiniLM-L6-v2
    python benchmarks/speed.py --precision fp32 # one precision only
    python benchmarks/speed.py --quick          # smoke run
"""

from __future__ import annotations

import copy
import random
import statistics
import sys
import time

import torch

import common
from adapterlab.backbones import BERT_BASE_RANDOM, STANDIN, load_backbone
from adapterlab.data import load_split, make_batches, padding_waste, tokenize
from adapterlab.placement import apply_method
from adapterlab.training import TrainConfig, train

METHODS = ("houlsby", "pfeiffer", "lora", "bitfit", "full", "layernorm", "head")
ORDERS = ("grouped", "shuffled")
PRECISIONS = ("fp32", "bf16")
BOTTLENECK = 64
BATCH_SIZE = 32
#: (rounds, steps per burst): rounds × steps measured steps per method and order.
PLAN = {STANDIN: (6, 5), BERT_BASE_RANDOM: (4, 4)}
TARGET_SPEEDUP = 1.5


def padding_table(tokenized) -> list[dict]:
    rows = []
    for order in ("sequential", "shuffled", "grouped"):
        batches = make_batches(tokenized, BATCH_SIZE, order, seed=0)
        real = sum(int(b["attention_mask"].sum()) for b in batches)
        padded = sum(b["attention_mask"].numel() for b in batches)
        rows.append({"order": order, "batches": len(batches), "padding_waste": padding_waste(batches),
                     "real_tokens_per_batch": real / len(batches), "padded_tokens_per_batch": padded / len(batches)})
    return rows


def burst(model, data, method: str, order: str, precision: str, steps: int, seed: int) -> tuple[int, float]:
    """``steps`` optimizer steps of the real loop in ``precision``; returns (examples, training seconds)."""
    config = TrainConfig(method=method, bottleneck=BOTTLENECK, max_steps=steps, batch_size=BATCH_SIZE,
                         order=order, precision=precision, seed=seed, device="cpu", progress=False)
    result = train(model, data, None, config)
    return result.history.examples, result.history.train_seconds


def measure_backbone(name: str, data_dir, methods, precisions, rounds: int, steps: int,
                     max_train) -> tuple[list, list, dict]:
    """Every (method, order, precision) runs one burst per round, in a shuffled order; round k feeds the same
    batches (seed k) to every method, so the order speed-up and the method and precision ratios are paired."""
    pristine, tokenizer, info = load_backbone(name, num_labels=2, fallback=False, seed=0)
    split = load_split("sst2", "train", data_dir, max_examples=max_train, seed=0)
    data = tokenize(split, tokenizer)
    models = {}
    for method in methods:
        models[method] = copy.deepcopy(pristine)
        torch.manual_seed(0)
        apply_method(models[method], method, **TrainConfig(method=method, bottleneck=BOTTLENECK).method_kwargs())
        for precision in precisions:
            burst(models[method], data, method, "grouped", precision, 2, seed=10_000)  # warm-up, untimed
    del pristine
    jobs = [(method, order, precision) for method in methods for order in ORDERS for precision in precisions]
    speed = {job: [] for job in jobs}  # examples/s per round
    totals = {job: [0, 0.0] for job in jobs}
    rng = random.Random(0)
    for k in range(rounds):
        rng.shuffle(jobs)
        for method, order, precision in jobs:
            examples, seconds = burst(models[method], data, method, order, precision, steps, seed=k)
            totals[method, order, precision][0] += examples
            totals[method, order, precision][1] += seconds
            speed[method, order, precision].append(examples / seconds)
        print(f"  {name}: round {k + 1} of {rounds} done", flush=True)
    rows = []
    for method in methods:
        for precision in precisions:
            grouped, shuffled = speed[method, "grouped", precision], speed[method, "shuffled", precision]
            row = {"backbone": name, "method": method, "precision": precision, "steps_per_order": rounds * steps}
            for order in ORDERS:
                examples, seconds = totals[method, order, precision]
                row[f"{order}_examples_per_second"] = examples / seconds
            row["speedup"] = statistics.median(g / s for g, s in zip(grouped, shuffled))
            row["speedup_per_round"] = [g / s for g, s in zip(grouped, shuffled)]
            full = speed["full", "grouped", precision] if "full" in methods else None
            row["vs_full"] = statistics.median(m / f for m, f in zip(grouped, full)) if full else None
            fp32 = speed[method, "grouped", "fp32"] if "fp32" in precisions else None
            row["vs_fp32"] = statistics.median(m / f for m, f in zip(grouped, fp32)) if fp32 else None
            rows.append(row)
            print(f"  {name} {method} {precision}: grouped {row['grouped_examples_per_second']:.1f}, shuffled "
                  f"{row['shuffled_examples_per_second']:.1f} examples/s, speed-up {row['speedup']:.2f}x",
                  flush=True)
    return rows, padding_table(data), {"backbone": info.describe(), "data": split.describe()}


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--backbone", action="append", choices=list(PLAN), help="measure only this backbone (repeatable)")
    p.add_argument("--method", action="append", choices=METHODS,
                   help="measure only this method (repeatable; full is added for the 'vs full FT' column)")
    p.add_argument("--precision", action="append", choices=PRECISIONS,
                   help="measure only this precision (repeatable; default: fp32 and bf16)")
    args = p.parse_args(argv)
    common.set_threads(args)
    data_dir = common.glue_dir(args.data)
    backbones = args.backbone or list(PLAN)
    methods = ("houlsby", "full") if args.quick else METHODS
    if args.method:
        methods = tuple(m for m in METHODS if m in args.method or m == "full")
    precisions = tuple(p for p in PRECISIONS if p in args.precision) if args.precision else PRECISIONS
    payload = {"benchmark": "speed", "machine": common.machine(), "batch_size": BATCH_SIZE, "bottleneck": BOTTLENECK,
               "quick": args.quick, "precisions": list(precisions), "rows": [], "padding": [], "sources": {}}
    started = time.perf_counter()
    for name in backbones:
        rounds, steps = (2, 2) if args.quick else PLAN[name]
        rows, padding, sources = measure_backbone(name, data_dir, methods, precisions, rounds, steps,
                                                  2_000 if args.quick else None)
        payload["rows"] += rows
        payload["padding"] = padding
        payload["sources"][name] = sources
    payload["machine"]["load_average_at_end"] = common.load_average()
    payload["seconds"] = time.perf_counter() - started
    speedups = [row["speedup"] for row in payload["rows"]]
    payload["target"] = {"target": f"length-grouped batches >= {TARGET_SPEEDUP}x the examples/s of shuffled batches",
                         "min_speedup": min(speedups), "met": min(speedups) >= TARGET_SPEEDUP}
    return common.publish("speed", args, payload, report(payload))


def report(payload: dict) -> str:
    split = next(iter(payload["sources"].values()))["data"]
    lines = [common.machine_line(payload["machine"]), f"data: {split}", "",
             f"Padding of one epoch, batch {payload['batch_size']}:",
             common.table(payload["padding"], [
                 ("order", "order", ""), ("batches", "batches", "d"), ("real_tokens_per_batch", "real tokens/batch", ".0f"),
                 ("padded_tokens_per_batch", "padded tokens/batch", ".0f"), ("padding_waste", "padding waste", ".2f")]),
             "", "Training examples/s (real loop, batch 32, r = 64 for adapters, LoRA at its default rank 8 on query and value; "
             "bf16: autocast, fp32 weights):",
             common.table(payload["rows"], [
                 ("backbone", "backbone", ""), ("method", "method", ""), ("precision", "precision", ""),
                 ("steps_per_order", "steps", "d"),
                 ("grouped_examples_per_second", "grouped ex/s", ".1f"),
                 ("shuffled_examples_per_second", "shuffled ex/s", ".1f"), ("speedup", "speed-up (median)", ".2f"),
                 ("vs_full", "grouped vs full FT", ".2f"), ("vs_fp32", "vs fp32", ".2f")])]
    target = payload["target"]
    lines += ["", f"[{'MET' if target['met'] else 'MISSED'}] {target['target']}: smallest speed-up "
                  f"{target['min_speedup']:.2f}x"]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
