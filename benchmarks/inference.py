"""Inference overhead of adapters on the BERT-base shape, at batch 1 and batch 32, on real SST-2 dev sentences.

Variants (all share the same frozen backbone tensors, see ``adapterlab.latency.inference_variants``): the
backbone alone, Houlsby and Pfeiffer GELU adapters with r = 64, a linear Houlsby adapter folded into the
dense layers, and a rank-64 LoRA on query/value merged into the weights. A second, independent timing of the
backbone alone ("backbone, A/A") is the control: its overhead is pure noise, so it shows how large a
difference this machine can produce from nothing.

Timing (``adapterlab.latency``): eval mode, ``torch.inference_mode``, 2 threads, warm-up rounds, then many
rounds in which every variant runs once on the same input in a seeded random order; the overhead of a variant
is the median over rounds of t_variant / t_backbone - 1, both timed in the same round. The 95 % interval
of that median comes from order statistics (distribution-free), so "within noise of 0" means the interval
holds 0.

    python benchmarks/inference.py           # batch 1 and batch 32 (about 20 min on 2 cores)
    python benchmarks/inference.py --profile # add an operator profile of backbone vs houlsby at batch 1
    python benchmarks/inference.py --rounds 32=40    # fewer or more rounds at batch 32
    python benchmarks/inference.py --quick   # smoke run
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time

import torch

import common
from adapterlab.backbones import BERT_BASE_RANDOM, TINY, load_backbone
from adapterlab.data import collate, load_split, tokenize
from adapterlab.latency import REFERENCE, inference_overhead, inference_variants

BOTTLENECK = 64
THREADS = 2
CONTROL = "backbone, A/A"
#: batch size -> (rounds, distinct inputs)
PLAN = {1: (300, 100), 32: (120, 20)}
TARGETS = {("houlsby", 1): 4.0, ("houlsby", 32): 3.5}  # the speed issue's targets for Houlsby r = 64


def dev_inputs(tokenized, batch_size: int, count: int, seed: int) -> list[dict]:
    """``count`` batches of random dev sentences, each padded to its longest (what a server would see)."""
    rng = random.Random(seed)
    batches = []
    for _ in range(count):
        rows = rng.sample(range(len(tokenized)), batch_size)
        batch = collate(tokenized, rows)
        batch.pop("labels")
        batches.append(batch)
    return batches


def median_interval(values: list[float], confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free interval for the median: the order statistics x_(k) and x_(n+1-k) (1-based), with the
    largest k whose binomial tail P(Bin(n, 1/2) <= k - 1) stays within (1 - confidence) / 2."""
    values = sorted(values)
    n = len(values)
    k, tail = 0, 0.0
    while tail + math.comb(n, k) / 2 ** n <= (1 - confidence) / 2:
        tail += math.comb(n, k) / 2 ** n
        k += 1
    if k == 0:  # too few rounds for this confidence: the full range
        return values[0], values[-1]
    return values[k - 1], values[n - k]


def rows_of(result, batch_size: int) -> list[dict]:
    rows = []
    reference = result.times[REFERENCE]
    for name in result.names:
        ratios = [100.0 * (t / ref - 1.0) for t, ref in zip(result.times[name], reference)]
        low, high = median_interval(ratios)
        row = {"batch": batch_size, "variant": name, "median_ms": result.median_ms(name),
               "overhead_percent": result.overhead_percent(name), "ci_low": low, "ci_high": high,
               "rounds": len(ratios)}
        target = TARGETS.get((name, batch_size))
        if target is not None:
            row["target_percent"] = target
            row["met"] = row["overhead_percent"] <= target
        if name in ("LoRA, merged", "linear adapter, folded"):
            row["within_noise_of_zero"] = low <= 0.0 <= high
        rows.append(row)
    return rows


def profile(variants: dict, batch: dict, repeats: int = 20, top: int = 12) -> dict:
    """Self CPU time per operator, backbone vs houlsby, summed over ``repeats`` calls at one input."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    tables = {}
    for name in (REFERENCE, "houlsby"):
        model = variants[name]
        with torch.inference_mode():
            for _ in range(3):
                model(**batch)
            with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(repeats):
                    model(**batch)
        events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
        tables[name] = [{"op": e.key, "calls": e.count // repeats, "self_ms": e.self_cpu_time_total / 1e3 / repeats}
                        for e in events[:top]]
    return tables


def rounds_option(text: str) -> tuple[int, int]:
    """``BATCH=ROUNDS`` (e.g. ``32=120``) as a pair of integers, or an argparse error that shows the form."""
    batch, _, rounds = text.partition("=")
    try:
        pair = int(batch), int(rounds)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected BATCH=ROUNDS such as 32=120; got {text!r}") from None
    if pair[0] not in PLAN or pair[1] < 1:
        raise argparse.ArgumentTypeError(f"BATCH must be one of {', '.join(map(str, PLAN))} and ROUNDS >= 1; got {text!r}")
    return pair


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0], default_threads=THREADS)
    p.add_argument("--profile", action="store_true", help="also profile backbone vs houlsby at batch 1 (torch.profiler)")
    p.add_argument("--rounds", type=rounds_option, action="append", default=[], metavar="BATCH=ROUNDS",
                   help="timed rounds at one batch size (repeatable); default " +
                        ", ".join(f"{batch}={rounds}" for batch, (rounds, _) in PLAN.items()))
    args = p.parse_args(argv)
    data_dir = common.glue_dir(args.data)
    common.set_threads(args)
    backbone = TINY if args.quick else BERT_BASE_RANDOM
    plan = {1: (6, 3), 32: (4, 2)} if args.quick else dict(PLAN)
    for batch_size, rounds in args.rounds:
        plan[batch_size] = (rounds, plan[batch_size][1])

    model, tokenizer, info = load_backbone(backbone, num_labels=2, fallback=False, seed=0)
    model.eval()
    split = load_split("sst2", "dev", data_dir)
    tokenized = tokenize(split, tokenizer)
    variants = inference_variants(model, bottleneck=BOTTLENECK, seed=0)
    variants = {REFERENCE: variants.pop(REFERENCE), CONTROL: model, **variants}

    payload = {"benchmark": "inference", "machine": common.machine(), "backbone": info.describe(),
               "data": split.describe(), "bottleneck": BOTTLENECK, "threads": torch.get_num_threads(),
               "quick": args.quick, "rows": []}
    started = time.perf_counter()
    for batch_size, (rounds, count) in plan.items():
        inputs = dev_inputs(tokenized, batch_size, count, seed=batch_size)
        tokens = sum(int(b["attention_mask"].sum()) for b in inputs) / len(inputs)
        padded = sum(b["attention_mask"].numel() for b in inputs) / len(inputs)
        print(f"batch {batch_size}: {rounds} rounds over {count} inputs "
              f"({tokens:.0f} real / {padded:.0f} padded tokens each) ...", flush=True)
        (result,) = inference_overhead(variants, {f"batch {batch_size}": inputs}, rounds=rounds, warmup=3, seed=0)
        for row in rows_of(result, batch_size):
            row.update(real_tokens=tokens, padded_tokens=padded)
            payload["rows"].append(row)
    if args.profile:
        batch = dev_inputs(tokenized, 1, 1, seed=1)[0]
        payload["profile"] = profile(variants, batch, repeats=3 if args.quick else 20)
    payload["seconds"] = time.perf_counter() - started
    payload["machine"]["load_average_at_end"] = common.load_average()
    return common.publish("inference", args, payload, report(payload))


def report(payload: dict) -> str:
    rows = []
    for row in payload["rows"]:
        verdict = ""
        if "met" in row:
            verdict = f"target <= {row['target_percent']:g} %: {'MET' if row['met'] else 'MISSED'}"
        elif "within_noise_of_zero" in row:
            verdict = "within noise of 0" if row["within_noise_of_zero"] else "NOT within noise of 0"
        rows.append(dict(row, interval=f"[{row['ci_low']:+.1f}, {row['ci_high']:+.1f}]", verdict=verdict))
    lines = [common.machine_line(payload["machine"]), payload["backbone"], f"data: {payload['data']}",
             f"adapters r = {payload['bottleneck']}, {payload['threads']} threads, eval mode, inference_mode", "",
             common.table(rows, [
                 ("batch", "batch", "d"), ("variant", "variant", ""), ("median_ms", "median ms", ".2f"),
                 ("overhead_percent", "overhead %", "+.1f"), ("interval", "95 % interval", ""),
                 ("rounds", "rounds", "d"), ("verdict", "", "")])]
    for name, ops in payload.get("profile", {}).items():
        lines += ["", f"profile, {name}, batch 1 (self CPU ms per forward):",
                  common.table(ops, [("op", "op", ""), ("calls", "calls", "d"), ("self_ms", "self ms", ".3f")])]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
