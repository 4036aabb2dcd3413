"""One training loop for every method the labs compare (labs 6-9); it evaluates with :mod:`adapterlab.evaluation`.

Adapters (houlsby, pfeiffer, parallel), full fine-tuning, the top-k layers, LayerNorm only and the head
only differ *only* in which parameters are trainable (:func:`adapterlab.placement.apply_method` sets
that), so one loop trains them all:

* AdamW over the trainable parameters only (frozen ones carry no optimizer state and cost no update),
  no weight decay on biases and LayerNorms (the BERT convention);
* the paper's schedule: the learning rate rises linearly from 0 over the first ``warmup_ratio`` (10 %)
  of the steps, then falls linearly to 0 at the last step;
* gradient clipping, a seed for everything random (dropout, batch order, adapter init);
* the precision (:mod:`adapterlab.precision`): float32, or the forward pass under bfloat16 autocast with
  float32 weights, gradients and optimizer state; "auto" (the default) takes bf16 only where a cached probe
  found it at least 1.2x faster on this machine. Evaluation always runs in float32, so metrics compare;
* evaluation every ``eval_every`` steps and at the end; the best state by the task's main metric is
  kept (a clone of the trainable tensors only) and put back into the model at the end;
* a tqdm progress bar (loss, last metric, ETA); Stop / Ctrl-C ends training cleanly with the partial
  history and the best state so far; a NaN/inf loss, or a loss that stays far above its start (a learning
  rate far too high), stops it with :class:`TrainingDiverged`, which names the likely cause.

Speed on a laptop CPU comes from the data more than from the loop: batches are padded to their own
longest sentence and, in the default ``grouped`` order, hold sentences of similar length. The loop
itself does no extra work: it reads the loss back from the device only as often as the progress bar
needs it, switches train/eval mode only when it changes, and evaluates under ``torch.inference_mode``
on batches sorted by length.

The same code runs on several processes through :class:`accelerate.Accelerator` (gradients are
averaged over processes; each process trains on its own share of every epoch's batches)::

    accelerate launch --num_processes 2 my_training_script.py      # two GPUs
    torchrun --nproc_per_node 2 my_training_script.py              # two CPU processes (gloo)
"""

from __future__ import annotations

import math
import numbers
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import broadcast_object_list, set_seed
from tqdm.auto import tqdm
from transformers import get_linear_schedule_with_warmup

from ..model.adapter import ACTIVATIONS, INIT_SCHEMES, PAPER_INIT_SCALE
from .data import ORDERS, TokenizedSplit, batch_indices, collate, get_task
from .evaluation import eval_batches, evaluate_batches, pick_device, to_device
from .evaluation import evaluate  # noqa: F401  (lab 8 imports it from here)
from ..model.lora import DEFAULT_LORA_ALPHA, DEFAULT_LORA_RANK, LORA_TARGET_SETS
from ..model.placement import METHODS, PLACEMENTS, apply_method, trainable_summary
from .precision import Choice, autocast, check_precision, resolve
from ..validation import check_bool, check_choice, check_init_scale, check_number, check_positive_int

#: Peak learning rate when TrainConfig.learning_rate is None. Adapters, LayerNorms and the head start
#: from (near) zero or from scratch and want a large rate; full fine-tuning and the top-k layers move
#: pretrained weights and want a small one (the paper sweeps 3e-5…3e-3 for adapters, 3e-5…1e-4 for
#: fine-tuning).
DEFAULT_LEARNING_RATES = {
    "houlsby": 1e-3,
    "pfeiffer": 1e-3,
    "parallel": 1e-3,
    "layernorm": 1e-3,
    "head": 1e-3,
    "full": 5e-5,
    "top_k": 5e-5,
    # LoRA's B starts at zero like an adapter's up-projection; Hu et al. train RoBERTa-base on GLUE with
    # 4e-4...5e-4 (5e-4 on SST-2).
    "lora": 5e-4,
    # Ben Zaken et al. sweep BitFit over 1e-4...1e-3 on BERT-base and a bias moves a whole feature, so the
    # small data and few steps of the labs want the top of that range.
    "bitfit": 1e-3,
}
#: On an accelerator, reading a loss back waits for the queued work; read them in blocks of this many
#: steps there (on the CPU the value is already there, so every step).
ACCELERATOR_SYNC_STEPS = 20
class TrainingDiverged(RuntimeError):
    """Training blew up: the loss became NaN or infinite, or stayed far above where it started (see
    :data:`DIVERGENCE_FACTOR`). ``step``, ``loss`` and ``history`` say where; the message names the
    likely cause, the learning rate first when it is above the method's default."""

    def __init__(self, step: int, loss: float, learning_rate: float, config: "TrainConfig", history: "History",
                 reason: str = ""):
        self.step, self.loss, self.history = step, loss, history
        self.backbone_info = self.data_description = self.toy_data = None  # run_experiment fills them in
        self.precision = None  # the adapterlab.precision.Choice, filled in by run_experiment
        default = DEFAULT_LEARNING_RATES[config.method]
        too_fast = (f"the learning rate is too high (peak {config.peak_learning_rate:g}, {learning_rate:.3g} at this "
                    f"step; the default for {config.method} is {default:g}): try 3-10x lower, or the default")
        causes = []
        if config.peak_learning_rate > default:
            causes.append(too_fast)
        if config.method in PLACEMENTS and config.init_scale > PAPER_INIT_SCALE:
            causes.append(f"the adapters' init_scale is too large ({config.init_scale:g}; the paper uses "
                          f"{PAPER_INIT_SCALE:g})")
        if config.max_grad_norm is None:
            causes.append("gradient clipping is off (max_grad_norm=None)")
        if not causes:
            causes.append(too_fast.replace("is too high", "may be too high for this model"))
        what = reason or f"the loss is {loss} at step {step}"
        label = "Likely cause" if len(causes) == 1 else "Likely causes"
        super().__init__(f"training diverged: {what}. {label}: " + "; ".join(causes))


#: Training counts as diverged when the loss stays above DIVERGENCE_FACTOR times its start (the first
#: step's loss, or the loss of guessing, ln(number of labels), if that is larger) for DIVERGENCE_STEPS
#: steps in a row. A learning rate far too high sends the loss there within a few steps (0.69 -> 1e6 with
#: lr 1000) and the run never returns; ordinary noise, even a bad batch or two, stays far below it.
DIVERGENCE_FACTOR = 10.0
DIVERGENCE_STEPS = 5


def check_divergence(history: "History", num_labels: int, config: "TrainConfig") -> None:
    """Raise :class:`TrainingDiverged` if the newest loss is not finite or the loss has stayed far above
    its start (see :data:`DIVERGENCE_FACTOR`); called after every loss the training loop reads back."""
    index = len(history.loss) - 1
    if index < 0:
        return
    loss = history.loss[index]
    if not math.isfinite(loss):
        raise TrainingDiverged(history.steps[index], loss, history.learning_rate[index], config, history)
    start = max(history.loss[0], math.log(num_labels))
    recent = history.loss[-DIVERGENCE_STEPS:]
    if index >= DIVERGENCE_STEPS and all(value > DIVERGENCE_FACTOR * start for value in recent):
        reason = (f"the loss has stayed above {DIVERGENCE_FACTOR:g}x its start ({start:.3g}) for {DIVERGENCE_STEPS} "
                  f"steps, {loss:.3g} at step {history.steps[index]}")
        raise TrainingDiverged(history.steps[index], loss, history.learning_rate[index], config, history, reason)


# --------------------------------------------------------------------------------------------------
# Configuration
# --------------------------------------------------------------------------------------------------


@dataclass
class TrainConfig:
    """Everything that decides a training run. Every field is checked (``validate``) when the config is
    made and again when training starts, so a widget that changes a field cannot slip a bad value in.

    ``learning_rate=None`` takes the method's default (DEFAULT_LEARNING_RATES). ``max_steps``, when
    set, overrides ``epochs``. ``eval_every=None`` evaluates only at the end. ``max_grad_norm=None``
    turns clipping off. ``device`` is ignored under a multi-process launch (each process uses the
    device the launcher gave it). ``precision`` is "auto", "fp32" or "bf16" (:mod:`adapterlab.precision`);
    the config of a finished run (``TrainResult.config``) holds the one it trained in.
    """

    method: str = "houlsby"
    bottleneck: int = 64
    activation: str = "gelu"
    init: str = "houlsby"
    init_scale: float = 1e-2
    train_layernorm: bool = True
    train_pooler: bool = False
    top_k: int = 2
    lora_rank: int = DEFAULT_LORA_RANK
    lora_alpha: float = DEFAULT_LORA_ALPHA
    lora_targets: str = "query_value"
    learning_rate: float | None = None
    epochs: float = 1.0
    max_steps: int | None = None
    batch_size: int = 32
    eval_batch_size: int = 128
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float | None = 1.0
    eval_every: int | None = None
    order: str = "grouped"
    precision: str = "auto"
    seed: int = 0
    device: str = "auto"
    progress: bool = True

    def __post_init__(self):
        self.validate()

    def validate(self) -> "TrainConfig":
        check_choice("method", self.method, METHODS)
        check_positive_int("bottleneck", self.bottleneck)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("init", self.init, INIT_SCHEMES)
        check_init_scale(self.init_scale)
        check_bool("train_layernorm", self.train_layernorm)
        check_bool("train_pooler", self.train_pooler)
        check_positive_int("top_k", self.top_k)
        check_positive_int("lora_rank", self.lora_rank)
        check_number("lora_alpha", self.lora_alpha, 0, low_inclusive=False)
        check_choice("lora_targets", self.lora_targets, tuple(LORA_TARGET_SETS))
        if self.learning_rate is not None:
            check_number("learning_rate", self.learning_rate, 0, low_inclusive=False)
        check_number("epochs", self.epochs, 0, low_inclusive=False)
        if self.max_steps is not None:
            check_positive_int("max_steps", self.max_steps)
        check_positive_int("batch_size", self.batch_size)
        check_positive_int("eval_batch_size", self.eval_batch_size)
        check_number("warmup_ratio", self.warmup_ratio, 0, low_inclusive=True, high=1, high_inclusive=False)
        check_number("weight_decay", self.weight_decay, 0, low_inclusive=True)
        if self.max_grad_norm is not None:
            check_number("max_grad_norm", self.max_grad_norm, 0, low_inclusive=False)
        if self.eval_every is not None:
            check_positive_int("eval_every", self.eval_every)
        check_choice("order", self.order, ORDERS)
        check_precision(self.precision)
        if isinstance(self.seed, bool) or not isinstance(self.seed, numbers.Integral) or self.seed < 0:
            raise ValueError(f"seed must be an integer >= 0; got {self.seed!r}")
        if not isinstance(self.device, (str, torch.device)):
            raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got {self.device!r}")
        check_bool("progress", self.progress)
        return self

    @property
    def peak_learning_rate(self) -> float:
        """The learning rate after warmup: ``learning_rate``, or the method's default."""
        return self.learning_rate if self.learning_rate is not None else DEFAULT_LEARNING_RATES[self.method]

    def method_kwargs(self) -> dict:
        """The arguments of :func:`apply_method` this config decides."""
        return dict(bottleneck=self.bottleneck, activation=self.activation, init=self.init,
                    init_scale=self.init_scale, train_layernorm=self.train_layernorm,
                    train_pooler=self.train_pooler, top_k=self.top_k, lora_rank=self.lora_rank,
                    lora_alpha=self.lora_alpha, lora_targets=self.lora_targets)

    def as_dict(self) -> dict:
        return dict(asdict(self), device=str(self.device), peak_learning_rate=self.peak_learning_rate)


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    """Steps of linear warmup: the first ``warmup_ratio`` of training, rounded up."""
    return math.ceil(warmup_ratio * total_steps)


# --------------------------------------------------------------------------------------------------
# History and result
# --------------------------------------------------------------------------------------------------


@dataclass
class History:
    """What happened during training, step by step and evaluation by evaluation.

    ``loss[i]`` and ``learning_rate[i]`` belong to optimizer step ``steps[i]`` (the rate that step used).
    Each entry of ``evals`` holds ``step``, ``epoch``, ``elapsed`` (seconds since the start), the eval
    ``loss`` and the task's metrics (fractions). ``examples_per_second`` counts training examples
    (over all processes) per second of training, evaluation excluded; ``wall_time`` includes it.
    """

    task: str = ""
    metric: str = "accuracy"
    title: str = ""
    steps: list = field(default_factory=list)
    loss: list = field(default_factory=list)
    learning_rate: list = field(default_factory=list)
    evals: list = field(default_factory=list)
    examples: int = 0
    train_seconds: float = 0.0
    wall_time: float = 0.0

    @property
    def examples_per_second(self) -> float:
        return self.examples / self.train_seconds if self.train_seconds > 0 else float("nan")

    def rows(self) -> list[dict]:
        """One plain dict per evaluation: step, epoch, mean training loss since the previous row, the
        learning rate at that step, eval loss and metrics, seconds elapsed. (A table without pandas.)"""
        rows, start = [], 0
        for entry in self.evals:
            end = entry["step"]  # steps are 1, 2, 3, ...: step s is entry s - 1
            window = self.loss[start:end]
            row = {"step": entry["step"], "epoch": round(entry["epoch"], 3),
                   "train_loss": sum(window) / len(window) if window else float("nan"),
                   "learning_rate": self.learning_rate[end - 1] if end else float("nan"),
                   "eval_loss": entry["loss"]}
            row.update({k: v for k, v in entry.items() if k not in ("step", "epoch", "loss", "elapsed")})
            row["elapsed_s"] = round(entry["elapsed"], 2)
            rows.append(row)
            start = end
        return rows

    def __str__(self) -> str:
        rows = self.rows()
        head = f"{self.title or 'training'}: {len(self.steps)} steps, {self.examples:,} examples, " \
               f"{self.examples_per_second:.1f} examples/s, {self.wall_time:.1f} s"
        if not rows:
            last = f", last loss {self.loss[-1]:.4f}" if self.loss else ""
            return head + last
        columns = list(rows[0])
        cells = [[_format_cell(row[c]) for c in columns] for row in rows]
        widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
        lines = [head, "  ".join(c.rjust(w) for c, w in zip(columns, widths))]
        lines += ["  ".join(v.rjust(w) for v, w in zip(r, widths)) for r in cells]
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {"task": self.task, "metric": self.metric, "steps": list(self.steps), "loss": list(self.loss),
                "learning_rate": list(self.learning_rate), "evals": [dict(e) for e in self.evals],
                "examples": self.examples, "examples_per_second": self.examples_per_second,
                "train_seconds": self.train_seconds, "wall_time": self.wall_time}


def _format_cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.2e}" if value and abs(value) < 1e-2 else f"{value:.4f}"
    return str(value)


@dataclass
class TrainResult:
    """What :func:`train` / :func:`run_experiment` return.

    ``metrics`` are the eval metrics of the state the model now holds (the best one seen), measured at
    ``best_step``; empty when there was no eval data (or training was stopped before any evaluation).
    ``trainable`` is :func:`trainable_summary` as a dict; ``backbone_info``, ``data_description`` and
    ``toy_data`` say which model and which data the numbers come from (filled by :func:`run_experiment`);
    ``precision`` is the :class:`adapterlab.precision.Choice` it trained with.
    """

    history: History
    metrics: dict
    best_step: int | None
    best_metric: float | None
    interrupted: bool
    model: torch.nn.Module = field(repr=False)
    config: TrainConfig
    trainable: dict
    train_seconds: float
    backbone_info: object = None
    data_description: dict | None = None
    toy_data: bool | None = None
    precision: Choice | None = None

    def summary(self, sources: bool = True) -> str:
        """A few lines for a notebook or the command line (``sources``: begin with the backbone and data)."""
        lines = []
        if sources and self.backbone_info is not None:
            lines.append(self.backbone_info.describe())
        if sources and self.precision is not None:
            lines.append(self.precision.describe())
        for role, text in (self.data_description or {}).items() if sources else ():
            lines.append(f"{role}: {text}")
        trained = self.trainable["total_trainable"]
        lines.append(f"method {self.config.method}: {trained:,} trained parameters "
                     f"({self.trainable['percent_of_backbone']:.2f} % of the backbone)")
        if self.metrics:
            scores = ", ".join(f"{k} {v:.4f}" for k, v in self.metrics.items())
            lines.append(f"best at step {self.best_step}: {scores}")
        lines.append(f"{len(self.history.steps)} steps in {self.train_seconds:.1f} s "
                     f"({self.history.examples_per_second:.1f} examples/s)" + (", STOPPED EARLY" if self.interrupted else ""))
        return "\n".join(lines)

    def to_dict(self) -> dict:
        """Everything but the model, as JSON values (metrics.json)."""
        info = self.backbone_info
        return {
            "metrics": dict(self.metrics), "best_step": self.best_step, "best_metric": self.best_metric,
            "interrupted": self.interrupted, "train_seconds": self.train_seconds,
            "examples_per_second": self.history.examples_per_second, "wall_time": self.history.wall_time,
            "config": self.config.as_dict(), "trainable": self.trainable,
            "backbone": asdict(info) if info is not None else None, "data": self.data_description,
            "toy_data": self.toy_data, "precision": self.config.precision,
            "precision_choice": asdict(self.precision) if self.precision is not None else None,
            "history": {"rows": self.history.rows(), **self.history.as_dict()},
        }


# --------------------------------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------------------------------


def _make_optimizer(named_parameters, config: TrainConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over the given (trainable) parameters; biases and LayerNorm weights get no weight decay."""
    decay, no_decay = [], []
    for name, parameter in named_parameters:
        (no_decay if name.endswith("bias") or "LayerNorm" in name else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor in one call: much less per-tensor overhead for the
    # ~100 small adapter tensors; it exists for CPU and CUDA tensors.
    fused = device.type in ("cpu", "cuda")
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.peak_learning_rate, fused=fused)


def _epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed batch-order seed for each (seed, epoch) pair."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


def train(model, train_data: TokenizedSplit, eval_data: TokenizedSplit | None, config: TrainConfig,
          callback=None, backbone: str | None = None) -> TrainResult:
    """Train the trainable parameters of ``model`` (prepared with :func:`apply_method`) on ``train_data``.

    ``callback(history)`` runs after every evaluation (on the main process), e.g. to redraw a plot; a
    KeyboardInterrupt raised there or anywhere in the loop stops training cleanly. Returns a
    :class:`TrainResult` whose model holds the best state seen (by the task's main metric), in eval mode.

    Several processes: launch the script with ``accelerate launch --num_processes N script.py`` (GPUs)
    or ``torchrun --nproc_per_node N script.py`` (CPU); every process calls train() with the same data
    and config, takes every N-th batch of each epoch, and ends with the same parameters.

    ``config.precision`` "auto" is resolved here (:func:`adapterlab.precision.resolve`, its probe cached
    under ``backbone``, by default the model's shape); under several processes the main process decides.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig; got {type(config).__name__}")
    config.validate()
    for name, data in (("train_data", train_data), ("eval_data", eval_data)):
        if (data is not None or name == "train_data") and (not isinstance(data, TokenizedSplit) or len(data) == 0):
            raise ValueError(f"{name} must be a non-empty TokenizedSplit (adapterlab.data.tokenize(split, tokenizer))")
    task = train_data.split.task
    if eval_data is not None and eval_data.split.task.name != task.name:
        raise ValueError(f"train_data is {task.name} but eval_data is {eval_data.split.task.name}")
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters: prepare it with apply_method(model, method) first")

    device = pick_device(config.device)
    # Under a launcher (WORLD_SIZE > 1) accelerate needs cpu=True to train CPU processes over gloo. A
    # single process places the model itself and leaves the flag alone: accelerate's state is
    # process-wide, and a flag that changes between runs in one notebook would be refused.
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    accelerator = Accelerator(device_placement=False, cpu=launched and device.type == "cpu")
    world, rank = accelerator.num_processes, accelerator.process_index
    if world > 1:
        device = accelerator.device  # the device the launcher gave this process
    choice = resolve(config.precision, backbone or _shape_name(model), model=model, device=device)
    if world > 1:
        choice = broadcast_object_list([choice])[0]
    set_seed(config.seed, device_specific=True)  # different dropout per process, same everything else
    batches_per_epoch = math.ceil(len(train_data) / config.batch_size)
    steps_per_epoch = batches_per_epoch // world  # every process must take the same number of steps
    if steps_per_epoch == 0:
        raise ValueError(f"{len(train_data)} training examples make {batches_per_epoch} batches of {config.batch_size}: "
                         f"too few for {world} processes; lower batch_size or add data")
    total_steps = config.max_steps or math.ceil(config.epochs * steps_per_epoch)

    model.to(device)
    optimizer = _make_optimizer(trainable, config, device)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps(total_steps, config.warmup_ratio), total_steps)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    parameters = [p for _, p in trainable]
    dev_batches = None
    if eval_data is not None:
        dev_batches = eval_batches(eval_data, config.eval_batch_size)[rank::world]
    sync_every = 1 if device.type == "cpu" else ACCELERATOR_SYNC_STEPS

    history = History(task=task.name, metric=task.metric, title=f"{config.method} on {task.name}")
    best_state, best_metric, best_step, best_metrics = None, None, None, {}
    pending: list[torch.Tensor] = []
    step, interrupted = 0, False
    bar = tqdm(total=total_steps, desc=history.title, unit="step", dynamic_ncols=True,
               disable=not (config.progress and accelerator.is_main_process))
    postfix = {}
    start = time.perf_counter()
    eval_seconds = 0.0

    def flush():
        """Read the pending losses back (one sync), check them, and show them on the bar."""
        if not pending:
            return
        losses = torch.stack(pending)
        if world > 1:
            losses = accelerator.reduce(losses, "mean")
        values = losses.tolist()
        pending.clear()
        for value in values:
            history.loss.append(value)
            check_divergence(history, task.num_labels, config)
        recent = history.loss[-10:]
        postfix["loss"] = f"{sum(recent) / len(recent):.4f}"
        bar.set_postfix(postfix, refresh=False)

    def run_eval():
        nonlocal best_state, best_metric, best_step, best_metrics, eval_seconds
        began = time.perf_counter()
        wrapped.eval()
        metrics = evaluate_batches(accelerator.unwrap_model(wrapped), dev_batches, task, device, accelerator)
        wrapped.train()
        eval_seconds += time.perf_counter() - began
        history.evals.append({"step": step, "epoch": step / steps_per_epoch, **metrics,
                              "elapsed": time.perf_counter() - start})
        score = metrics[task.metric]
        if best_metric is None or score > best_metric:
            best_metric, best_step, best_metrics = score, step, metrics
            best_state = {n: p.detach().clone() for n, p in trainable}
        postfix[task.metric] = f"{score:.4f}"
        bar.set_postfix(postfix, refresh=False)
        if callback is not None and accelerator.is_main_process:
            callback(history)

    wrapped.train()
    try:
        epoch = 0
        while step < total_steps:
            order = batch_indices(train_data.lengths, config.batch_size, config.order, _epoch_seed(config.seed, epoch))
            for first in range(0, steps_per_epoch * world, world):
                if step == total_steps:
                    break
                group = order[first:first + world]  # one batch per process
                batch = to_device(collate(train_data, group[rank]), device)
                with autocast(choice.precision, device):  # bf16: the forward pass only, weights stay fp32
                    loss = wrapped(**batch).loss
                accelerator.backward(loss)
                if config.max_grad_norm is not None:
                    accelerator.clip_grad_norm_(parameters, config.max_grad_norm)
                history.learning_rate.append(scheduler.get_last_lr()[0])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
                step += 1
                history.steps.append(step)
                history.examples += sum(len(indices) for indices in group)
                pending.append(loss.detach())
                evaluate_now = dev_batches is not None and (
                    step == total_steps or (config.eval_every is not None and step % config.eval_every == 0))
                if step % sync_every == 0 or evaluate_now or step == total_steps:
                    flush()
                bar.update(1)
                if evaluate_now:
                    run_eval()
            epoch += 1
    except KeyboardInterrupt:
        interrupted = True
        history.loss.extend(t.item() for t in pending)
        pending.clear()
        done = min(len(history.steps), len(history.learning_rate), len(history.loss))  # a step cut short
        del history.steps[done:], history.learning_rate[done:], history.loss[done:]
    finally:
        bar.close()
        history.wall_time = time.perf_counter() - start
        history.train_seconds = history.wall_time - eval_seconds

    model = accelerator.unwrap_model(wrapped)
    model.eval()
    if best_state is not None and best_step != step:
        with torch.no_grad():
            for name, parameter in trainable:
                parameter.copy_(best_state[name])
    if interrupted and accelerator.is_main_process:
        where = f"step {best_step}" if best_step is not None else "the last step (no evaluation ran)"
        print(f"Training stopped at step {step} of {total_steps}; the model holds the state of {where}.",
              file=sys.stderr)
    return TrainResult(
        history=history, metrics=best_metrics, best_step=best_step if eval_data is not None else step,
        best_metric=best_metric, interrupted=interrupted, model=model,
        config=replace(config, precision=choice.precision), trainable=trainable_summary(model).as_dict(),
        train_seconds=history.train_seconds, precision=choice,
    )


def _shape_name(model) -> str:
    """A name for a backbone that came without one: its architecture and shape (the probe's cache key)."""
    config = model.config
    return f"{config.model_type} {config.num_hidden_layers} layers d={config.hidden_size}"


def run_experiment(task="sst2", config: TrainConfig | None = None, backbone: str = "bert-base-uncased",
                   data_dir=None, max_train: int | None = None, max_eval: int | None = None, callback=None,
                   fallback: bool = True, loader=None) -> TrainResult:
    """Load a backbone and a task's train/dev data, apply ``config.method``, train, evaluate.

    The result says which backbone really ran (``backbone_info``: the offline stand-in when
    bert-base-uncased is not available and ``fallback`` is on) and which data (``data_description``:
    source and row counts, "TOY DATA" when the project's own small sets were used; ``toy_data`` says
    the same as a boolean). A :class:`TrainingDiverged` it raises carries the same three. Subsets of
    ``max_train`` / ``max_eval`` rows are label-stratified and seeded with ``config.seed``. The precision
    (``precision``, a :class:`adapterlab.precision.Choice`) is decided before training and printed under the
    backbone line. ``loader`` replaces :func:`load_experiment` (same arguments): the training panel passes
    one that keeps the backbone and the data loaded between runs.
    """
    config = TrainConfig() if config is None else config
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig; got {type(config).__name__}")
    config.validate()
    spec = get_task(task)
    loaded = (loader or load_experiment)(spec, backbone, data_dir, max_train, max_eval, fallback, config.seed)
    model, info = loaded.model, loaded.info
    description = {"train": loaded.train_split.describe(), "eval": loaded.eval_split.describe()}
    choice = resolve(config.precision, info.loaded, model=model, device=pick_device(config.device))
    config = replace(config, precision=choice.precision)
    if config.progress:
        print(info.describe(), choice.describe(), *(f"{k}: {v}" for k, v in description.items()), sep="\n")
    set_seed(config.seed)  # the adapters' initial weights
    apply_method(model, config.method, **config.method_kwargs())
    toy_data = loaded.train_split.is_toy or loaded.eval_split.is_toy
    try:
        result = train(model, loaded.train_data, loaded.eval_data, config, callback=callback, backbone=info.loaded)
    except TrainingDiverged as error:  # say what ran, so that the partial run can be reported in full
        error.backbone_info, error.data_description, error.toy_data = info, description, toy_data
        error.precision = choice
        raise
    result.backbone_info, result.data_description, result.toy_data = info, description, toy_data
    result.precision = choice  # with the probe's speed-up when it was "auto"
    return result


@dataclass
class Loaded:
    """A backbone and a task's train/dev rows, tokenized: what :func:`run_experiment` trains on."""

    model: torch.nn.Module
    tokenizer: object
    info: object
    train_split: object
    eval_split: object
    train_data: TokenizedSplit
    eval_data: TokenizedSplit


def load_experiment(task, backbone: str, data_dir, max_train: int | None, max_eval: int | None, fallback: bool,
                    seed: int) -> Loaded:
    """Read the task's train and dev rows (seeded subsets), load the backbone (its new head seeded), tokenize.
    The data comes first, so a missing data file is reported before a slow model load."""
    from .backbones import load_backbone
    from .data import load_split, tokenize

    spec = get_task(task)
    train_split = load_split(spec, "train", data_dir, max_examples=max_train, seed=seed)
    eval_split = load_split(spec, "dev", data_dir, max_examples=max_eval, seed=seed)
    model, tokenizer, info = load_backbone(backbone, num_labels=spec.num_labels, fallback=fallback, seed=seed)
    return Loaded(model, tokenizer, info, train_split, eval_split, tokenize(train_split, tokenizer),
                  tokenize(eval_split, tokenizer))
