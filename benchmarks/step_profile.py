"""Where a training step and a forward pass spend their time: torch.profiler, with each part of the model
and of the loop marked, so that time is told apart as the backbone's dense GEMMs, attention, the adapters,
LayerNorms, the optimizer, collation and what runs outside any operator (Python and dispatch).

* Training: the real loop (``adapterlab.training.train``), Houlsby adapters r = 64 with the pooler trained
  (the side-by-side recipe), on real SST-2 train batches of 32, length-grouped; one untimed run of a few
  steps warms up, then a profiled run of ``--steps`` steps; then one evaluation of 256 dev rows, timed
  without the profiler (the loop evaluates once an epoch: 625 steps in the side-by-side run).
* Inference: the BERT-base shape (random weights), bare and with Houlsby adapters r = 64, eval mode and
  ``torch.inference_mode``, at batch 1 and batch 32 of real SST-2 dev sentences, ``--repeats`` forwards each.

For every marked part the table gives its time per step (or per forward) in total and the share of it
spent outside operators ("outside ops": the part's Python, module calls and dispatch between kernels). The
profiler adds a few microseconds per operator, so its totals run above unprofiled ones: read the shares,
and take speed itself from ``side_by_side.py`` and ``inference.py``.

    python benchmarks/step_profile.py                     # the stand-in and the BERT-base shape (about 5 min)
    python benchmarks/step_profile.py --precision bf16    # training under bf16 autocast (fp32 by default)
    python benchmarks/step_profile.py --quick             # smoke run
"""

from __future__ import annotations

import statistics
import sys
import time
from contextlib import contextmanager
from dataclasses import replace

import common
import torch
from adapterlab.adapter import BottleneckAdapter
from adapterlab.backbones import BERT_BASE_RANDOM, STANDIN, TINY, load_backbone
from adapterlab.data import load_split, take_subset, tokenize
from adapterlab.placement import apply_method
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from adapterlab.training import TrainConfig, loop, train
from adapterlab.training.evaluation import eval_batches, evaluate_batches

THREADS = 2
BOTTLENECK = 64

ADAPTERS, ATTENTION, DENSE = ("adapters (down, f, up, residual)", "attention (Q, K, V and softmax(QKᵀ)V)",
                              "dense GEMMs (attention out, FFN in and out)")
LAYERNORMS, EMBEDDINGS, HEAD = "LayerNorms", "embeddings", "pooler and classifier"
COLLATION, LOSS_READ = "collation", "loss read-back"
WHOLE = "whole"  # the mark around everything profiled
EVAL_ROWS = 256
#: torch's own marks, read as parts of a step.
TORCH_MARKS = {"Optimizer.step#AdamW.step": "optimizer step (fused AdamW)",
               "Optimizer.zero_grad#AdamW.zero_grad": "zero_grad"}
PARTS = {ADAPTERS, ATTENTION, DENSE, LAYERNORMS, EMBEDDINGS, HEAD, COLLATION, LOSS_READ, *TORCH_MARKS}


def model_part(name: str, module: nn.Module) -> str | None:
    """The part of the model a module is, or None; no part holds another (an adapter's own dense layers are
    the adapter's), so the parts' times add up."""
    kind = type(module).__name__
    if isinstance(module, BottleneckAdapter):
        return ADAPTERS
    if kind.endswith("SelfAttention"):
        return ATTENTION
    if isinstance(module, nn.Linear) and name.endswith(".dense") and ".encoder." in f".{name}":
        return DENSE
    if isinstance(module, nn.LayerNorm) and ".encoder." in f".{name}":
        return LAYERNORMS
    if kind.endswith("Embeddings"):
        return EMBEDDINGS
    if name.endswith(("pooler", "classifier")):
        return HEAD
    return None


@contextmanager
def marked(model: nn.Module):
    """Mark every part of ``model`` (model_part) as a profiler range while it runs."""
    handles, open_ranges = [], {}

    def enter(label):
        def hook(module, args):
            open_ranges.setdefault(id(module), []).append(record_function(label).__enter__())
        return hook

    def leave(module, args, output):
        open_ranges[id(module)].pop().__exit__(None, None, None)

    for name, module in model.named_modules():
        label = model_part(name, module)
        if label is not None:
            handles += [module.register_forward_pre_hook(enter(label)), module.register_forward_hook(leave)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def loop_marked():
    """Mark the loop's own parts: collation and the reads of the losses (torch marks the optimizer's)."""
    labels = {"collate": COLLATION, "to_device": COLLATION, "_read_losses": LOSS_READ}
    originals = {name: getattr(loop, name) for name in labels}

    def wrap(name):
        def wrapped(*args, **kwargs):
            with record_function(labels[name]):
                return originals[name](*args, **kwargs)
        return wrapped

    for name in originals:
        setattr(loop, name, wrap(name))
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(loop, name, original)


def part_rows(prof, per: int) -> list[dict]:
    """One row per marked part: ms per step (or forward), and the share of it outside any operator."""
    events = {e.key: e for e in prof.key_averages()}
    whole = events[WHOLE]
    rows, covered = [], 0.0
    backward = [e for key, e in events.items() if key.startswith("autograd::engine::evaluate_function")]
    for label, event in events.items():
        if label not in PARTS or event.device_type != torch.autograd.DeviceType.CPU:
            continue
        rows.append({"part": TORCH_MARKS.get(label, label), "calls": event.count / per, "ms": event.cpu_time_total / 1e3 / per,
                     "outside_ops": event.self_cpu_time_total / max(event.cpu_time_total, 1e-9)})
        covered += event.cpu_time_total
    if backward:
        total = sum(e.cpu_time_total for e in backward)
        rows.append({"part": "backward (autograd, all parts)", "calls": sum(e.count for e in backward) / per,
                     "ms": total / 1e3 / per, "outside_ops": None})
        covered += total
    rows.sort(key=lambda row: -row["ms"])
    rows.append({"part": "rest (unmarked: residual adds, masks, loss, loop)", "calls": None,
                 "ms": (whole.cpu_time_total - covered) / 1e3 / per, "outside_ops": None})
    rows.append({"part": "whole", "calls": None, "ms": whole.cpu_time_total / 1e3 / per, "outside_ops": None})
    for row in rows:
        row["share"] = row["ms"] / rows[-1]["ms"]
    return rows


def training_profile(data_dir, backbone: str, steps: int, precision: str) -> tuple[list[dict], dict, str]:
    """The parts of a training step, and the time of one evaluation of 256 dev rows (unprofiled, median of 3)."""
    model, tokenizer, info = load_backbone(backbone, num_labels=2, seed=0)
    apply_method(model, "houlsby", bottleneck=BOTTLENECK, train_pooler=True)
    train_rows = tokenize(take_subset(load_split("sst2", "train", data_dir), 32 * (steps + 4), seed=0), tokenizer)
    dev_rows = tokenize(take_subset(load_split("sst2", "dev", data_dir), EVAL_ROWS, seed=0), tokenizer)
    config = TrainConfig(method="houlsby", bottleneck=BOTTLENECK, batch_size=32, precision=precision, progress=False,
                         train_pooler=True, max_steps=steps)
    train(model, train_rows, None, replace(config, max_steps=3))  # warm-up, untimed
    with marked(model), loop_marked(), profile(activities=[ProfilerActivity.CPU]) as prof, record_function(WHOLE):
        train(model, train_rows, None, config)
    model.eval()
    batches = eval_batches(dev_rows, config.eval_batch_size)
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        evaluate_batches(model, batches, dev_rows.split.task, torch.device("cpu"))
        seconds.append(time.perf_counter() - began)
    evaluation = {"rows": len(dev_rows), "ms": 1e3 * statistics.median(seconds)}
    return part_rows(prof, steps), evaluation, info.describe()


def inference_profile(data_dir, backbone: str, repeats: int) -> tuple[dict, str]:
    bare, tokenizer, info = load_backbone(backbone, num_labels=2, seed=0)
    adapted, _, _ = load_backbone(backbone, num_labels=2, seed=0)
    apply_method(adapted, "houlsby", bottleneck=BOTTLENECK)
    dev = tokenize(load_split("sst2", "dev", data_dir), tokenizer)
    tables = {}
    for batch_size in (1, 32):
        batch = loop.collate(dev, list(range(batch_size)))
        batch.pop("labels")
        for label, model in (("backbone", bare), ("houlsby r=64", adapted)):
            model.eval()
            with torch.inference_mode():
                for _ in range(3):
                    model(**batch)
                with marked(model), profile(activities=[ProfilerActivity.CPU]) as prof, record_function(WHOLE):
                    for _ in range(repeats):
                        model(**batch)
            tables[f"{label}, batch {batch_size}"] = part_rows(prof, repeats)
    return tables, info.describe()


COLUMNS = [("part", "part", ""), ("calls", "calls", ".0f"), ("ms", "ms", ".2f"), ("share", "share", ".1%"),
           ("outside_ops", "outside ops", ".0%")]


def main(argv=None) -> int:
    p = common.parser(__doc__.splitlines()[0], default_threads=THREADS)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32", help="training precision (default fp32)")
    p.add_argument("--steps", type=int, default=30, help="profiled training steps (default 30)")
    p.add_argument("--repeats", type=int, default=20, help="profiled forwards per batch size (default 20)")
    args = p.parse_args(argv)
    data_dir = common.glue_dir(args.data)
    common.set_threads(args)
    steps, repeats = (3, 2) if args.quick else (args.steps, args.repeats)
    training, evaluation, training_backbone = training_profile(data_dir, TINY if args.quick else STANDIN, steps, args.precision)
    inference, inference_backbone = inference_profile(data_dir, TINY if args.quick else BERT_BASE_RANDOM, repeats)
    payload = {"benchmark": "step_profile", "machine": common.machine(), "precision": args.precision, "steps": steps,
               "repeats": repeats, "training_backbone": training_backbone, "training": training,
               "evaluation": evaluation,
               "inference_backbone": inference_backbone, "inference": inference}
    payload["machine"]["load_average_at_end"] = common.load_average()
    return common.publish("step_profile", args, payload, report(payload))


def report(payload: dict) -> str:
    lines = [common.machine_line(payload["machine"]), "",
             (f"training step ({payload['training_backbone']}; Houlsby r = {BOTTLENECK}, pooler trained, batch 32, "
             f"{payload['precision']}; ms per step over {payload['steps']} steps):"),
             common.table(payload["training"], COLUMNS),
             f"evaluation of {payload['evaluation']['rows']} dev rows, unprofiled: {payload['evaluation']['ms']:.0f} ms"]
    for name, rows in payload["inference"].items():
        lines += ["", f"forward, {name} ({payload['inference_backbone']}; ms per forward):",
                  common.table(rows, COLUMNS)]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
