"""Peak resident memory while training, per method, each method in a process of its own.

A process's peak resident set size (ru_maxrss) only ever grows, so measuring several methods in one process
would report the largest of them for all. Each (backbone, method) therefore runs in a fresh child process
(``python benchmarks/memory.py --worker BACKBONE METHOD``) that loads the backbone, prepares the method,
trains a few steps of the real loop on the same real SST-2 train batches (length-grouped, batch 32) and
reports three numbers: resident memory after loading the data and the model, the peak over the whole
process, and their difference — what training adds (gradients, optimizer state, activations).

    python benchmarks/memory.py            # stand-in and BERT-base shape, 5 methods each (a few minutes)
    python benchmarks/memory.py --quick    # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import common
from adapterlab.backbones import BERT_BASE_RANDOM, STANDIN

METHODS = ("houlsby", "pfeiffer", "full", "layernorm", "head")
BACKBONES = (STANDIN, BERT_BASE_RANDOM)
BOTTLENECK = 64
BATCH_SIZE = 32
STEPS = 5
TRAIN_ROWS = 2_000  # a seeded subset: the same batches for every method
MIB = 2 ** 20


def resident_bytes() -> int:
    """Current resident set size: psutil when installed, else /proc/self/status (Linux)."""
    try:
        import psutil
    except ImportError:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("cannot read the resident set size: install psutil or run on Linux")
    return psutil.Process().memory_info().rss


def peak_resident_bytes() -> int:
    """This process's peak resident set size so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def worker(backbone: str, method: str, data_dir: str, steps: int, rows: int) -> dict:
    """Runs in the child: load, prepare, train ``steps`` steps, report memory in bytes."""
    import torch

    from adapterlab.backbones import load_backbone
    from adapterlab.data import load_split, tokenize
    from adapterlab.placement import apply_method, trainable_summary
    from adapterlab.training import TrainConfig, train

    split = load_split("sst2", "train", data_dir, max_examples=rows, seed=0)
    model, tokenizer, _ = load_backbone(backbone, num_labels=2, fallback=False, seed=0)
    data = tokenize(split, tokenizer)
    torch.manual_seed(0)
    apply_method(model, method, bottleneck=BOTTLENECK)
    loaded = resident_bytes()
    peak_before = peak_resident_bytes()
    config = TrainConfig(method=method, bottleneck=BOTTLENECK, max_steps=steps, batch_size=BATCH_SIZE,
                         order="grouped", seed=0, device="cpu", progress=False, precision="fp32")
    result = train(model, data, None, config)
    return {"backbone": backbone, "method": method, "steps": len(result.history.steps),
            "trained_params": trainable_summary(model).total_trainable,
            "rss_after_load": loaded, "peak_before_training": peak_before, "peak_rss": peak_resident_bytes(),
            "train_seconds": result.history.train_seconds}


def run_child(backbone: str, method: str, data_dir, steps: int, rows: int, threads: int | None) -> dict:
    command = [sys.executable, __file__, "--worker", backbone, method, "--data", str(data_dir),
               "--steps", str(steps), "--rows", str(rows)] + ([] if threads is None else ["--threads", str(threads)])
    done = subprocess.run(command, capture_output=True, text=True, env=dict(os.environ, TQDM_DISABLE="1"))
    if done.returncode != 0:
        raise RuntimeError(f"{backbone} {method}: the worker failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--worker", nargs=2, metavar=("BACKBONE", "METHOD"), help=argparse.SUPPRESS)
    p.add_argument("--steps", type=int, default=STEPS, help=f"training steps per method (default {STEPS})")
    p.add_argument("--rows", type=int, default=TRAIN_ROWS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    common.set_threads(args)
    data_dir = common.glue_dir(args.data)
    if args.worker:
        print(json.dumps(worker(*args.worker, data_dir, args.steps, args.rows)))
        return 0

    backbones, methods, steps = BACKBONES, METHODS, args.steps
    if args.quick:
        backbones, methods, steps = (STANDIN,), ("houlsby", "full"), 2
    payload = {"benchmark": "memory", "machine": common.machine(), "batch_size": BATCH_SIZE,
               "bottleneck": BOTTLENECK, "train_rows": args.rows, "quick": args.quick, "rows": []}
    started = time.perf_counter()
    for backbone in backbones:
        for method in methods:
            row = run_child(backbone, method, data_dir, steps, args.rows, args.threads)
            row["training_adds"] = row["peak_rss"] - row["rss_after_load"]
            payload["rows"].append(row)
            print(f"  {backbone} {method}: peak {row['peak_rss'] / MIB:.0f} MiB", flush=True)
    payload["seconds"] = time.perf_counter() - started
    payload["machine"]["load_average_at_end"] = common.load_average()
    return common.publish("memory", args, payload, report(payload))


def report(payload: dict) -> str:
    rows = [dict(row, **{k + "_mib": row[k] / MIB for k in ("rss_after_load", "peak_rss", "training_adds")})
            for row in payload["rows"]]
    return "\n".join([
        common.machine_line(payload["machine"]),
        f"each row: a fresh process; {rows[0]['steps']} training steps of batch {payload['batch_size']} "
        f"(length-grouped, SST-2 train, {payload['train_rows']:,}-row seeded subset); adapters r = {payload['bottleneck']}",
        "",
        common.table(rows, [
            ("backbone", "backbone", ""), ("method", "method", ""), ("trained_params", "trained params", ",d"),
            ("rss_after_load_mib", "RSS loaded MiB", ".0f"), ("peak_rss_mib", "peak RSS MiB", ".0f"),
            ("training_adds_mib", "training adds MiB", ".0f")]),
    ])


if __name__ == "__main__":
    sys.exit(main())
