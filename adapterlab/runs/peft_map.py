"""The map of the PEFT family, measured (lab 10): one row per method, every cell measured on the lab's backbone.

The adapter-theory notes draw a map: adapters are expressive but *resident* (they run at every forward
pass and cannot be merged), LoRA is mergeable (zero latency once merged, but a merged model serves one
task), and only methods that leave the backbone's weight matrices alone let many tasks share one backbone
per request. :func:`measure_map` measures each of these claims instead of stating it. For each method it

* applies the method to a fresh copy of the backbone and counts what trains;
* trains a few steps with the labs' own loop (:func:`adapterlab.training.train`) and reports its
  training examples per second;
* saves what the task trained (safetensors) and measures the file: the checkpoint one more task costs;
* compares every weight matrix of the backbone (every tensor of two or more dimensions) with the
  pretrained one: a method that changed none of them lets tasks share one backbone per request;
* merges what can be merged (LoRA into its weights; a nonlinear adapter cannot be, and says so) and
  checks that the merged model has exactly the backbone's architecture and computes what the unmerged
  one did;
* times the backbone, the trained model and the merged one, interleaved and paired
  (:mod:`adapterlab.latency`), at each batch size given: the inference overhead unmerged and merged.
"""

from __future__ import annotations

import copy
import dataclasses
import tempfile
from dataclasses import dataclass
from pathlib import Path

import safetensors.torch
import torch
from torch import nn

from ..model.latency import time_interleaved
from .. import methods
from ..methods import apply_method
from ..model.trainable import trainable_summary
from ..training import TrainConfig, train

#: The methods of the map, as (label, TrainConfig settings); those the installed package does not know are left out.
MAP_METHODS = (
    ("head only", dict(method="head")),
    ("BitFit", dict(method="bitfit")),
    ("LayerNorm only", dict(method="layernorm")),
    ("LoRA r=8", dict(method="lora", lora_rank=8)),
    ("Pfeiffer r=64", dict(method="pfeiffer", bottleneck=64)),
    ("Houlsby r=8", dict(method="houlsby", bottleneck=8)),
    ("Houlsby r=64", dict(method="houlsby", bottleneck=64)),
    ("top-1 layer", dict(method="top_k", top_k=1)),
    ("full fine-tuning", dict(method="full")),
)
#: A merged model must compute what the unmerged one did, up to float32 rounding.
MERGE_TOLERANCE = 1e-4


def map_configs(**common) -> dict[str, TrainConfig]:
    """label → TrainConfig for every method of :data:`MAP_METHODS` this package can train (lab 10)."""
    fields = {field.name for field in dataclasses.fields(TrainConfig)}
    return {label: TrainConfig(**settings, **common) for label, settings in MAP_METHODS
            if settings["method"] in methods.REGISTRY and set(settings) <= fields}


@dataclass
class MapRow:
    """One method's row of the map. ``overhead`` and ``merged_overhead`` map a batch label to the paired
    median time over the backbone alone, in percent; ``merged_overhead`` is None when the method cannot
    be merged. ``shares_backbone`` / ``merged_shares_backbone``: no weight matrix of the backbone changed
    (unmerged / after merging; None when it cannot be merged)."""

    label: str
    method: str
    trained: int
    checkpoint_bytes: int
    examples_per_second: float
    overhead: dict
    mergeable: bool
    merged_overhead: dict | None
    shares_backbone: bool
    merged_shares_backbone: bool | None
    merge_error: float | None = None


def architecture(model: nn.Module) -> list[tuple[str, str, tuple]]:
    """Every parameter as (module type, name, shape): two models with equal lists have the same architecture
    and the same cost per forward pass."""
    modules = dict(model.named_modules())
    return [(type(modules[name.rpartition(".")[0]]).__name__, name, tuple(p.shape))
            for name, p in model.named_parameters()]


def _backbone_name(name: str) -> str:
    """A parameter's name in the plain backbone: a LoRA layer keeps the frozen layer it wraps as ``.base``."""
    return name.replace(".base.", ".")


def changed_matrices(model: nn.Module, pretrained: dict[str, torch.Tensor]) -> list[str]:
    """The backbone's weight matrices (tensors of 2+ dimensions outside the new classifier) that differ from
    ``pretrained`` (name → tensor of the untouched backbone)."""
    changed = []
    for name, tensor in model.state_dict().items():
        plain = _backbone_name(name)
        if plain in pretrained and pretrained[plain].dim() >= 2 and not plain.startswith("classifier."):
            if not torch.equal(tensor, pretrained[plain]):
                changed.append(plain)
    return changed


def merged(model: nn.Module) -> nn.Module | None:
    """A merged copy of a trained model with the backbone's architecture, or None where the method cannot
    be merged (a nonlinear or parallel adapter). A method that trains the backbone's own tensors is its own
    merged model."""
    method = methods.registry.prepared_by(model)
    if method is None:
        return model
    if method.merge is None:
        return None
    try:
        return method.merge(copy.deepcopy(model))
    except ValueError:  # a nonlinear (or parallel) adapter: no fixed matrix computes it
        return None


def checkpoint_bytes(model: nn.Module) -> int:
    """Size on disk of everything the model trains, saved as safetensors: what one more task costs."""
    tensors = {name: p.detach().contiguous() for name, p in model.named_parameters() if p.requires_grad}
    with tempfile.TemporaryDirectory(prefix="adapterlab-map-") as folder:
        path = Path(folder) / "task.safetensors"
        safetensors.torch.save_file(tensors, str(path))
        return path.stat().st_size


def _timings(variants: dict[str, nn.Module], inputs: dict[str, list], rounds: int, seed: int) -> dict[str, dict]:
    """Paired overhead in percent over ``variants["backbone"]`` for every other variant: name → {batch: %}."""
    out = {name: {} for name in variants if name != "backbone"}
    for label, batches in inputs.items():
        def runner(model):
            def run(k):
                with torch.inference_mode():
                    return model(**batches[k % len(batches)])
            return run

        result = time_interleaved({name: runner(m) for name, m in variants.items()}, rounds, warmup=1,
                                  reference="backbone", seed=seed, label=label)
        for name in out:
            out[name][label] = result.overhead_percent(name)
    return out


def measure_method(backbone: nn.Module, label: str, config: TrainConfig, train_data, inputs: dict[str, list],
                   steps: int, rounds: int) -> MapRow:
    """One row of the map (see the module docstring); ``backbone`` is left as it was."""
    pretrained = {name: tensor.detach().clone() for name, tensor in backbone.state_dict().items()}
    model = copy.deepcopy(backbone)
    torch.manual_seed(config.seed)  # the new modules' initial weights
    apply_method(model, config.method, **config.method_kwargs())
    trained = trainable_summary(model).total_trainable
    result = train(model, train_data, None, dataclasses.replace(config, max_steps=steps, eval_every=None,
                                                                progress=False))
    model.eval()
    size = checkpoint_bytes(model)
    shares = not changed_matrices(model, pretrained)
    merged_model = merged(model)
    mergeable = merged_model is not None and architecture(merged_model) == architecture(backbone)
    merge_error = None
    if merged_model is not None and merged_model is not model:
        first = next(iter(inputs.values()))[0]
        with torch.inference_mode():
            merge_error = float((model(**first).logits - merged_model(**first).logits).abs().max())
    variants = {"backbone": backbone.eval(), "unmerged": model}
    if merged_model is not None and merged_model is not model:
        variants["merged"] = merged_model
    times = _timings(variants, inputs, rounds, config.seed)
    merged_times = None if merged_model is None else times.get("merged", times["unmerged"])
    return MapRow(label=label, method=config.method, trained=trained, checkpoint_bytes=size,
                  examples_per_second=result.history.examples_per_second, overhead=times["unmerged"],
                  mergeable=mergeable, merged_overhead=merged_times, shares_backbone=shares,
                  merged_shares_backbone=None if merged_model is None else not changed_matrices(merged_model, pretrained),
                  merge_error=merge_error)


def measure_map(backbone: nn.Module, train_data, inputs: dict[str, list], configs: dict[str, TrainConfig],
                steps: int, rounds: int, progress: bool = True) -> list[MapRow]:
    """The map, one :class:`MapRow` per config (lab 10). ``inputs`` maps a label ("batch 1") to model inputs
    for the timing; ``steps`` training steps measure the training speed; ``rounds`` timed rounds per batch."""
    from tqdm.auto import tqdm

    rows = []
    for label, config in tqdm(configs.items(), desc="measuring the map", unit="method", disable=not progress):
        rows.append(measure_method(backbone, label, config, train_data, inputs, steps, rounds))
    return rows


def _size(count: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _percents(values: dict | None) -> str:
    return "—" if values is None else ", ".join(f"{value:+.0f} %" for value in values.values())


def _yes(value: bool | None) -> str:
    return "—" if value is None else "yes" if value else "no"


def map_table(rows: list[MapRow]) -> str:
    """The measured map as a plain-text table, narrow enough for a slide (lab 10)."""
    batches = ", ".join(rows[0].overhead) if rows else ""
    head = ["method", "trained", "checkpoint", "train ex/s", "overhead", "merged", "merges", "shares", "merged shares"]
    body = [[row.label, f"{row.trained:,}", _size(row.checkpoint_bytes), f"{row.examples_per_second:.0f}",
             _percents(row.overhead), _percents(row.merged_overhead), _yes(row.mergeable), _yes(row.shares_backbone),
             _yes(row.merged_shares_backbone)] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(head)]
    lines = ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
             for r in [head] + body]
    lines.append(f"overhead, merged: time over the backbone alone at {batches} (paired medians), unmerged and merged")
    lines.append("merges: merged, it has the backbone's architecture; shares: no weight matrix of the backbone changed")
    return "\n".join(lines)
