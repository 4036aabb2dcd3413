"""Inference timing: what adapters cost at every forward pass, and what a merged LoRA costs (nothing).

A fair comparison of a few milliseconds needs care, because a laptop's speed drifts (turbo clocks,
other programs, caches) by more than the effect we measure. So:

* **interleaved** — every round runs every variant once, in an order that changes from round to
  round (seeded), so that drift hits all variants alike and no variant always runs first;
* **paired** — the overhead of a variant is computed within a round, against the reference timed
  in that same round on the same input, and the median over rounds is reported;
* **medians**, never means: one hiccup (a garbage collection, another process) cannot move them.

The table reports, for each variant, the paired overhead and the time it implies (the reference's
median times the variant's median ratio to it), so its two columns cannot disagree. A variant's own
median over rounds is a different measurement: on a machine whose load drifts it can come out below
the reference's although the variant was slower in most rounds.

:func:`forward_flops` counts the floating-point operations of a forward pass: the structural fact a
timing estimates (a folded or merged model does exactly the backbone's work), the same on every machine;
:func:`training_flops` counts a training pass's forward and backward the same way.

:func:`time_interleaved` does the timing of any callables; :func:`inference_variants` builds the
models compared in the labs (the backbone alone, Houlsby and Pfeiffer adapters, a folded linear
adapter, a merged LoRA) so that they share the frozen backbone tensors (one copy in memory);
:func:`inference_overhead` times them at several batch sizes on real sentences.
"""

from __future__ import annotations

import copy
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from ..validation import check_positive_int
from .fold import fold_adapters
from .lora import LoRALinear
from .placement import add_adapters, encoder_layers

REFERENCE = "backbone"


@dataclass
class LatencyResult:
    """Seconds per call of each variant, round by round (``times[name][k]`` is round k).

    Every variant ran once per round on the same input, so entries with the same index are a pair.
    """

    times: dict[str, list[float]]
    reference: str
    label: str = ""
    orders: list[list[str]] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return list(self.times)

    def median_ms(self, name: str) -> float:
        """Median milliseconds per call."""
        return 1e3 * statistics.median(self.times[name])

    def overhead_percent(self, name: str) -> float:
        """Median over rounds of (t_variant / t_reference − 1) · 100, both timed in the same round."""
        pairs = zip(self.times[name], self.times[self.reference])
        return 100.0 * statistics.median(t / ref - 1.0 for t, ref in pairs)

    def paired_ms(self, name: str) -> float:
        """The reference's median milliseconds times the variant's paired ratio (1 + overhead / 100).

        The time the paired overhead implies: unlike the variant's own median, it always agrees with
        :meth:`overhead_percent` (labs 3 and 9 show it beside the overhead).
        """
        return self.median_ms(self.reference) * (1.0 + self.overhead_percent(name) / 100.0)

    def rows(self) -> list[dict]:
        """One plain dict per variant: label, variant, own median ms, paired ms, paired overhead %, rounds."""
        return [
            {
                "setting": self.label,
                "variant": name,
                "median_ms": round(self.median_ms(name), 3),
                "paired_ms": round(self.paired_ms(name), 3),
                "overhead_percent": round(self.overhead_percent(name), 1),
                "rounds": len(self.times[name]),
            }
            for name in self.times
        ]


def time_interleaved(
    functions: dict[str, Callable[[int], object]],
    rounds: int = 30,
    warmup: int = 2,
    reference: str | None = None,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
    label: str = "",
) -> LatencyResult:
    """Time ``functions[name](k)`` for every name in each round k, in a shuffled order per round.

    Each function receives the round index so that it can pick that round's input; all variants get
    the same k within a round, which is what makes the rounds pairs. ``warmup`` rounds run first,
    untimed (first calls allocate memory and pick kernels). ``reference`` (default: the first name)
    is what overheads are measured against. ``clock`` is injectable so that tests need no real time.
    """
    if not functions:
        raise ValueError("functions is empty: pass a dict {name: function(round_index)} with at least one entry")
    rounds = check_positive_int("rounds", rounds)
    if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 0:
        raise ValueError(f"warmup must be an integer >= 0; got {warmup!r}")
    names = list(functions)
    reference = names[0] if reference is None else reference
    if reference not in functions:
        raise ValueError(f"reference must be one of {names}; got {reference!r}")
    order_rng = random.Random(seed)
    for k in range(warmup):
        for name in names:
            functions[name](k)
    times = {name: [] for name in names}
    orders = []
    for k in range(rounds):
        order = names[:]
        order_rng.shuffle(order)
        orders.append(order)
        for name in order:
            start = clock()
            functions[name](k)
            times[name].append(clock() - start)
    return LatencyResult(times, reference, label, orders)


def _shared_copy(model: nn.Module) -> nn.Module:
    """A copy of the module tree whose parameters and buffers are the *same tensors* as the model's.

    Adding adapters or swapping a layer in the copy leaves the original alone, yet the frozen
    backbone exists once in memory: five BERT-base variants cost one BERT-base, not five.
    """
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    return copy.deepcopy(model, memo)


def _merged_lora(model: nn.Module, rank: int, seed: int) -> nn.Module:
    """LoRA on every attention query and value projection, merged and unloaded.

    B is drawn small and non-zero (a trained update, not the zero init) so the merged weights really
    differ. After merging, each LoRALinear is replaced by its own (changed) base layer, as a deployed
    model would be: exactly the backbone's architecture.
    """
    variant = _shared_copy(model)
    generator = torch.Generator().manual_seed(seed)
    for layer in encoder_layers(variant):
        attention = layer.attention.self
        for name in ("query", "value"):
            # deepcopy without the memo: the merge writes into this weight, never the shared one.
            lora = LoRALinear(copy.deepcopy(getattr(attention, name)), rank)
            with torch.no_grad():
                lora.lora_B.copy_(1e-3 * torch.randn(lora.lora_B.shape, generator=generator))
            setattr(attention, name, lora.merge().base)
    return variant


def inference_variants(model: nn.Module, bottleneck: int = 64, seed: int = 0) -> dict[str, nn.Module]:
    """The models the serving lab times, all in eval mode and sharing the model's frozen tensors.

    * ``backbone`` — the model itself, no adapters;
    * ``houlsby`` / ``pfeiffer`` — GELU adapters of width ``bottleneck`` (2 resp. 1 per layer);
    * ``linear adapter, folded`` — Houlsby adapters without a nonlinearity, folded into the dense
      layers (:func:`adapterlab.lora.fold_adapters`): the original architecture again;
    * ``LoRA, merged`` — rank-``bottleneck`` LoRA on query and value, merged into the weights.

    The adapters carry the init of the paper; their values do not change their cost. The model
    must not have adapters already.
    """
    check_positive_int("bottleneck", bottleneck)
    # add_adapters freezes parameters, and the variants share them with the model: restore the flags.
    requires_grad = {parameter: parameter.requires_grad for parameter in model.parameters()}
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        variants = {REFERENCE: model}
        for placement in ("houlsby", "pfeiffer"):
            variants[placement] = add_adapters(_shared_copy(model), placement, bottleneck)
        linear = add_adapters(_shared_copy(model), "houlsby", bottleneck, activation="identity")
        variants["linear adapter, folded"] = fold_adapters(linear)
        variants["LoRA, merged"] = _merged_lora(model, bottleneck, seed)
    for parameter, flag in requires_grad.items():
        parameter.requires_grad_(flag)
    return {name: variant.eval() for name, variant in variants.items()}


def inference_overhead(
    variants: dict[str, nn.Module],
    batches: dict[str, Sequence[dict]],
    rounds: int = 30,
    warmup: int = 2,
    seed: int = 0,
    clock: Callable[[], float] = time.perf_counter,
) -> list[LatencyResult]:
    """Time every variant on every setting of ``batches``, interleaved and paired.

    ``batches`` maps a label (e.g. "batch 1") to a list of model inputs (dicts of tensors with
    input_ids, attention_mask, ...); round k feeds input ``k % len(inputs)`` to every variant, so
    each round compares the variants on the same real sentences. Runs under ``torch.inference_mode``.
    The first variant is the reference.
    """
    results = []
    for label, inputs in batches.items():
        if len(inputs) == 0:
            raise ValueError(f"batches[{label!r}] is empty: give at least one input batch")

        def runner(variant):
            def run(k: int):
                with torch.inference_mode():
                    return variant(**inputs[k % len(inputs)])

            return run

        functions = {name: runner(variant) for name, variant in variants.items()}
        results.append(time_interleaved(functions, rounds, warmup, seed=seed, clock=clock, label=label))
    return results


def overhead_table(results: Sequence[LatencyResult]) -> str:
    """A plain-text table of paired ms and paired overhead per variant and setting (lab 9).

    Both columns come from the same per-round ratios, so a variant shown slower than the reference
    in one column is slower in the other.
    """
    lines = [f"{'setting':<10}{'variant':<26}{'ms (paired)':>12}{'overhead':>10}"]
    for result in results:
        for row in result.rows():
            lines.append(
                f"{row['setting']:<10}{row['variant']:<26}{row['paired_ms']:>12.2f}{row['overhead_percent']:>+9.1f}%"
            )
    return "\n".join(lines)


def forward_flops(model: nn.Module, inputs: dict) -> int:
    """Floating-point operations of one forward pass of ``model(**inputs)``, counted by torch's
    FlopCounterMode (matrix products and attention; elementwise work such as GELU is not counted).

    A timing depends on the machine and its load; this count does not. Labs 3 and 9 check with it
    that a folded or merged model does exactly the backbone's work and that adapters add some.
    """
    with FlopCounterMode(display=False) as counter, torch.inference_mode():
        model(**inputs)
    return int(counter.get_total_flops())


def training_flops(model: nn.Module, batch: dict) -> tuple[int, int]:
    """(forward, backward) floating-point operations of one training pass on ``batch`` (with labels).

    The backward of a layer computes the gradient for its input (to reach the layers below) and, when
    its weight trains, the gradient for the weight: two matrix products per forward one. With frozen
    weights only the first remains, so adapters save about half the backward, not most of it (lab 0).
    The gradients stay in ``.grad``, so a lab can see which tensors received one.
    """
    with FlopCounterMode(display=False) as forward:
        loss = model(**batch).loss
    with FlopCounterMode(display=False) as backward:
        loss.backward()
    return int(forward.get_total_flops()), int(backward.get_total_flops())
