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

from collections.abc import Mapping

from .. import methods
from ..model.adapter import PAPER_INIT_SCALE
from .data import TokenizedSplit, batch_indices, collate
from .evaluation import eval_batches, evaluate_batches, pick_device, to_device
from .evaluation import evaluate  # noqa: F401  (lab 8 imports it from here)
from ..model.trainable import trainable_summary
from .config import TrainConfig
from .precision import Choice, autocast, resolve

class _DefaultRates(Mapping):
    """Each method's default peak learning rate, read from the method registry (where each is explained)."""

    def __getitem__(self, method):
        if method not in methods.REGISTRY:
            raise KeyError(method)
        return methods.get(method).learning_rate

    def __iter__(self):
        return iter(methods.names())

    def __len__(self):
        return len(methods.REGISTRY)


#: Peak learning rate when TrainConfig.learning_rate is None, per method.
DEFAULT_LEARNING_RATES = _DefaultRates()
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
        if "init_scale" in methods.get(config.method).settings and config.init_scale > PAPER_INIT_SCALE:
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
    selected_on: str | None = None
    validation_metric: float | None = None

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
            "selected_on": self.selected_on, "validation_metric": self.validation_metric,
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


def configure_optimizer(model: torch.nn.Module, config: TrainConfig, device: torch.device,
                        verbose: bool = False) -> torch.optim.AdamW:
    """AdamW over the parameters that train, and nothing else: a frozen parameter gets
    no optimizer state and costs no update. Biases and LayerNorm weights get no weight
    decay (the BERT convention), so there are two groups; ``verbose`` prints how many
    tensors and numbers each holds — which is exactly what a method trains."""
    decay, no_decay = [], []
    for name, parameter in model.named_parameters():
        if parameter.requires_grad:
            no_decay_here = name.endswith("bias") or "LayerNorm" in name
            (no_decay if no_decay_here else decay).append(parameter)
    if verbose:
        for label, group in (("with weight decay", decay), ("without weight decay", no_decay)):
            print(f"{len(group)} tensors {label} ({sum(p.numel() for p in group):,} numbers)")
    groups = [{"params": decay, "weight_decay": config.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # The fused kernel updates every tensor in one call: much less per-tensor overhead
    # for the ~100 small adapter tensors; it exists for CPU and CUDA tensors.
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=config.peak_learning_rate,
                             fused=device.type in ("cpu", "cuda"))


def train_step(model, batch: dict, optimizer, scheduler, max_grad_norm: float | None,
               accelerator: Accelerator, precision: str = "fp32") -> torch.Tensor:
    """One optimizer step: forward (under bf16 autocast when asked; weights stay fp32),
    backward, clip the gradients, step the optimizer and the schedule, zero the gradients.
    Returns the loss, not yet read back from the device (reading it is a sync the loop
    makes only when it needs the number)."""
    with autocast(precision, batch["input_ids"].device):
        loss = model(**batch).loss
    accelerator.backward(loss)
    if max_grad_norm is not None:
        trained = [p for p in model.parameters() if p.requires_grad]
        accelerator.clip_grad_norm_(trained, max_grad_norm)
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def _epoch_seed(seed: int, epoch: int) -> int:
    """A well-mixed batch-order seed for each (seed, epoch) pair."""
    return int(np.random.SeedSequence([seed, epoch]).generate_state(1)[0])


@dataclass
class _Best:
    """The best evaluation so far by the selection score, and a copy of the trainable tensors then."""

    score: float | None = None
    step: int | None = None
    metrics: dict = field(default_factory=dict)
    state: dict | None = None

    def offer(self, score: float, step: int, metrics: dict, trainable) -> None:
        if self.score is None or score > self.score:
            self.score, self.step, self.metrics = score, step, metrics
            self.state = {n: p.detach().clone() for n, p in trainable}


def _check_splits(train_data, eval_data, validation_data) -> None:
    for name, data in (("train_data", train_data), ("eval_data", eval_data), ("validation_data", validation_data)):
        if (data is not None or name == "train_data") and (not isinstance(data, TokenizedSplit) or len(data) == 0):
            raise ValueError(f"{name} must be a non-empty TokenizedSplit (adapterlab.data.tokenize(split, tokenizer))")
    task = train_data.split.task
    for data in (eval_data, validation_data):
        if data is not None and data.split.task.name != task.name:
            raise ValueError(f"train_data is {task.name} but an evaluation split is {data.split.task.name}")


def train(model, train_data: TokenizedSplit, eval_data: TokenizedSplit | None, config: TrainConfig,
          callback=None, backbone: str | None = None, validation_data: TokenizedSplit | None = None) -> TrainResult:
    """Train the trainable parameters of ``model`` (prepared with :func:`adapterlab.methods.apply_method`).

    Every ``eval_every`` steps and at the end the model is evaluated on ``eval_data`` (dev), and on
    ``validation_data`` when given; the step kept is the best by the task's metric on validation when
    there is one (dev is then only reported: it never chooses), else on dev. ``callback(history)`` runs
    after every evaluation (e.g. to redraw a plot); a KeyboardInterrupt there or anywhere in the loop stops
    training cleanly. Returns a :class:`TrainResult` whose model holds the kept state, in eval mode.

    Several processes: launch the script with ``accelerate launch --num_processes N script.py`` (GPUs) or
    ``torchrun --nproc_per_node N script.py`` (CPU); every process calls train() with the same data and
    config, takes every N-th batch of each epoch, and ends with the same parameters. ``config.precision``
    "auto" is resolved here (its probe cached under ``backbone``); under several processes the main
    process decides. The process group stays open for the script's own collectives: end the script with
    ``torch.distributed.destroy_process_group()``, as ``adapterlab train`` does, or a process may abort at exit.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig; got {type(config).__name__}")
    config.validate()
    _check_splits(train_data, eval_data, validation_data)
    task = train_data.split.task
    trainable = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if not trainable:
        raise ValueError("the model has no trainable parameters: prepare it with apply_method(model, method) first")

    # Where it runs: one process places the model itself; under a launcher (WORLD_SIZE > 1) accelerate
    # needs cpu=True to train CPU processes over gloo (its state is process-wide, so the flag is left alone
    # otherwise: a flag that changes between runs in one notebook would be refused).
    device = pick_device(config.device)
    launched = int(os.environ.get("WORLD_SIZE", "1")) > 1
    accelerator = Accelerator(device_placement=False, cpu=launched and device.type == "cpu")
    world, rank = accelerator.num_processes, accelerator.process_index
    if world > 1:
        device = accelerator.device
    choice = resolve(config.precision, backbone or _shape_name(model), model=model, device=device)
    if world > 1:
        choice = broadcast_object_list([choice])[0]
    set_seed(config.seed, device_specific=True)  # different dropout per process, same everything else

    # How long: every process takes the same number of steps.
    steps_per_epoch = math.ceil(len(train_data) / config.batch_size) // world
    if steps_per_epoch == 0:
        raise ValueError(f"{len(train_data)} training examples make too few batches of {config.batch_size} for "
                         f"{world} processes; lower batch_size or add data")
    total_steps = config.max_steps or math.ceil(config.epochs * steps_per_epoch)

    # The optimizer and the paper's schedule: linear warmup over warmup_ratio of the steps, then linear decay.
    model.to(device)
    optimizer = configure_optimizer(model, config, device)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup_steps(total_steps, config.warmup_ratio), total_steps)
    wrapped, optimizer = accelerator.prepare(model, optimizer)
    splits = {name: eval_batches(data, config.eval_batch_size)[rank::world]
              for name, data in (("dev", eval_data), ("validation", validation_data)) if data is not None}
    selects_on = "validation" if "validation" in splits else "dev"
    sync_every = 1 if device.type == "cpu" else ACCELERATOR_SYNC_STEPS

    title = f"{methods.get(config.method).label} on {task.glue_folder or task.name}"  # "Houlsby adapters on CoLA"
    history = History(task=task.name, metric=task.metric, title=title)
    best, pending, step, interrupted = _Best(), [], 0, False
    bar = _ProgressBar(total_steps, history.title, config.progress and accelerator.is_main_process)
    start, eval_seconds = time.perf_counter(), 0.0
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
                history.learning_rate.append(scheduler.get_last_lr()[0])
                pending.append(train_step(wrapped, batch, optimizer, scheduler, config.max_grad_norm, accelerator,
                                          choice.precision))
                step += 1
                history.steps.append(step)
                history.examples += sum(len(indices) for indices in group)
                evaluate_now = splits and (step == total_steps or (config.eval_every and step % config.eval_every == 0))
                if step % sync_every == 0 or evaluate_now or step == total_steps:
                    _read_losses(pending, history, accelerator, task.num_labels, config, bar)
                bar.update()
                if evaluate_now:
                    began = time.perf_counter()
                    wrapped.eval()
                    scores = {name: evaluate_batches(accelerator.unwrap_model(wrapped), batches, task, device,
                                                     accelerator) for name, batches in splits.items()}
                    wrapped.train()
                    eval_seconds += time.perf_counter() - began
                    entry = {"step": step, "epoch": step / steps_per_epoch, **scores["dev"]} if "dev" in scores \
                        else {"step": step, "epoch": step / steps_per_epoch}
                    if "validation" in scores:
                        entry["validation"] = scores["validation"]
                    history.evals.append({**entry, "elapsed": time.perf_counter() - start})
                    best.offer(scores[selects_on][task.metric], step, scores.get("dev", {}), trainable)
                    bar.show(task.metric, scores[selects_on][task.metric])
                    if callback is not None and accelerator.is_main_process:
                        callback(history)
            epoch += 1
    except KeyboardInterrupt:
        interrupted = True
        history.loss.extend(t.item() for t in pending)
        done = min(len(history.steps), len(history.learning_rate), len(history.loss))  # a step cut short
        del history.steps[done:], history.learning_rate[done:], history.loss[done:]
    finally:
        bar.close()
        history.wall_time = time.perf_counter() - start
        history.train_seconds = history.wall_time - eval_seconds

    # Keep the selected state.
    model = accelerator.unwrap_model(wrapped)
    model.eval()
    if best.state is not None and best.step != step:
        with torch.no_grad():
            for name, parameter in trainable:
                parameter.copy_(best.state[name])
    if interrupted and accelerator.is_main_process:
        where = f"step {best.step}" if best.step is not None else "the last step (no evaluation ran)"
        print(f"Training stopped at step {step} of {total_steps}; the model holds the state of {where}.", file=sys.stderr)
    dev_score = best.metrics.get(task.metric) if best.metrics else None
    return TrainResult(
        history=history, metrics=best.metrics, best_step=best.step if splits else step,
        best_metric=dev_score if selects_on == "validation" else best.score, interrupted=interrupted, model=model,
        config=replace(config, precision=choice.precision), trainable=trainable_summary(model).as_dict(),
        train_seconds=history.train_seconds, precision=choice, selected_on=selects_on if splits else None,
        validation_metric=best.score if selects_on == "validation" else None,
    )


def _read_losses(pending: list, history: "History", accelerator, num_labels: int, config, bar) -> None:
    """Read the pending losses back (one sync), check them for divergence, and show them on the bar."""
    if not pending:
        return
    losses = torch.stack(pending)
    if accelerator.num_processes > 1:
        losses = accelerator.reduce(losses, "mean")
    pending.clear()
    for value in losses.tolist():
        history.loss.append(value)
        check_divergence(history, num_labels, config)
    recent = history.loss[-10:]
    bar.show("loss", sum(recent) / len(recent))


class _ProgressBar:
    """tqdm with the latest loss and metric beside the ETA, refreshed only as tqdm would anyway."""

    def __init__(self, total: int, title: str, enabled: bool):
        self.bar = tqdm(total=total, desc=title, unit="step", dynamic_ncols=True, disable=not enabled)
        self.postfix = {}

    def show(self, name: str, value: float) -> None:
        self.postfix[name] = f"{value:.4f}"
        self.bar.set_postfix(self.postfix, refresh=False)

    def update(self) -> None:
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


def _shape_name(model) -> str:
    """A name for a backbone that came without one: its architecture and shape (the probe's cache key)."""
    config = model.config
    return f"{config.model_type} {config.num_hidden_layers} layers d={config.hidden_size}"
