"""Self-checks for the exercises of the training labs (6–10): one training step, the Matthews
correlation, the span-ablation loop, answering mixed requests with adapter sets and the Pareto front
of accuracy against trained parameters.

Like :mod:`adapterlab.checks`, each check runs the student's code on random cases, compares it with an
independent reference, prints one line starting with ✔, raises :class:`CheckFailed` naming the mistake
on a wrong answer, and says "The answer is missing" while the exercise still raises NotImplementedError.
The models are small random BERT classifiers built inside the check (d = 32; BERT-base's 12 layers where
names or spans depend on the depth; dropout on where training or serving is checked, non-zero adapter biases
where adapters are switched off), handed over in the modes the lab uses and in the others, so every check runs
in seconds, needs neither a backbone download nor data, and an answer right only in one state shows.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import numbers
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from ...methods.checkpoints import CONFIG_FILE, load_adapter_set, save_adapter_set, saved_parameters
from ...methods.registry import set_trainable
from ...model.placement import add_adapters, enabled_layers, encoder_layers, set_adapters_enabled
from ...model.trainable import parameter_group
from ...runs.ablation import span_ablation
from ...training.data import matthews
from .audit import ANYTHING, REQUIRES_GRAD, WEIGHTS, hook_count
from .checks import (POOLER_STAYS_FROZEN, CheckFailed, PackageAnswer, call_answer, close_enough, makes_everywhere,
                     plain_errors, report_passed, smallest_failing, _drawn_case_failed)

__all__ = ["CheckFailed", "check_training_step", "check_matthews", "check_span_ablation", "check_serving",
           "check_pareto_front"]


def _tiny_classifier(seed: int, layers: int = 3, init_scale: float = 1e-2, dropout: float = 0.0):
    """A tiny random BertForSequenceClassification with Houlsby adapters (r = 4), dropout off unless asked for."""
    from transformers import BertConfig, BertForSequenceClassification  # only the checks that need it pay for it

    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=layers, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=dropout,
                        attention_probs_dropout_prob=dropout, num_labels=2)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = BertForSequenceClassification(config)
        add_adapters(model, "houlsby", bottleneck=4, init_scale=init_scale)
    return model.eval()


def _token_batch(seed: int, rows: int, length: int = 8) -> torch.Tensor:
    return torch.randint(1, 100, (rows, length), generator=torch.Generator().manual_seed(seed))


def _as_float(value) -> float | None:
    """A number (int, float, NumPy or 0-d tensor) as a float; None for anything else."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    return None


# --------------------------------------------------------------------------------------------------
# Lab 6: freezing, the optimizer and one training step
# --------------------------------------------------------------------------------------------------

TRAINING_STEPS = 4
TRAINING_LR = 1e-2

_GROUP_ADVICE = {
    "adapters": "the adapters are what this method trains: keep them trainable",
    "layernorm": "the LayerNorms train too, as in the paper (2d parameters each)",
    "classifier": "the classifier is new, made for the task, so it must train",
}


def _check_frozen(model, expected: set[str]) -> None:
    """The requires_grad flags must follow the package's freeze policy (adapters, LayerNorms, classifier;
    the pretrained pooler stays frozen, as in adapter-bert)."""
    trainable = {name for name, p in model.named_parameters() if p.requires_grad}
    if trainable == expected:
        return
    total = sum(1 for _ in model.parameters())
    if len(trainable) == total:
        raise CheckFailed(
            f"All {total} tensors still require grad: the backbone is not frozen, so full fine-tuning is what "
            f"your step would do. Only the {len(expected)} tensors of the adapters, LayerNorms and classifier "
            "train; set requires_grad to False on every other one."
        )
    extra = sorted(trainable - expected)
    if extra and {parameter_group(model, name) for name in extra} == {"pooler"}:
        raise CheckFailed(f"The pooler still requires grad ({', '.join(extra)}), but {POOLER_STAYS_FROZEN}.")
    if extra:
        raise CheckFailed(
            f"{len(extra)} backbone tensors still require grad, e.g. {extra[0]}: freeze everything but the "
            "adapters, the LayerNorms and the classifier (the pretrained pooler stays frozen too)."
        )
    missing = sorted(expected - trainable)
    group = parameter_group(model, missing[0])
    raise CheckFailed(
        f"{len(missing)} tensors that should train are frozen, e.g. {missing[0]} ({group}): "
        f"{_GROUP_ADVICE.get(group, 'keep it trainable')}."
    )


def _check_optimizer_holds(model, optimizer) -> None:
    """The optimizer must hold exactly the trainable tensors (nanoGPT's configure_optimizers habit), each once."""
    listed = [p for group in optimizer.param_groups for p in group["params"]]
    held = {id(p) for p in listed}
    names = {id(p): name for name, p in model.named_parameters()}
    if len(listed) != len(held):
        twice = next(p for k, p in enumerate(listed) if any(p is q for q in listed[:k]))
        raise CheckFailed(
            f"Your optimizer holds {names.get(id(twice), 'a tensor')} twice ({len(listed)} entries for {len(held)} "
            "tensors): each step would update it twice. List every trainable tensor once."
        )
    frozen = [name for name, p in model.named_parameters() if not p.requires_grad and id(p) in held]
    if frozen:
        raise CheckFailed(
            f"Your optimizer holds {len(frozen)} frozen tensors, e.g. {frozen[0]}: it was built over every "
            "parameter (before freezing?). PyTorch's AdamW skips a tensor whose .grad is None, weight decay "
            "included, so they would not move here; but the optimizer then hides what trains and updates any "
            "frozen tensor a gradient ever reaches. Build it over the parameters that require grad."
        )
    left_out = [name for name, p in model.named_parameters() if p.requires_grad and id(p) not in held]
    if left_out:
        raise CheckFailed(
            f"Your optimizer leaves out {len(left_out)} trainable tensors, e.g. {left_out[0]}: they get "
            "gradients but never move. Give it every parameter that requires grad."
        )
    if len(held) > len(names):
        raise CheckFailed("Your optimizer holds tensors that are not the model's parameters: build it over "
                          "model.parameters() (those that require grad).")


def _check_optimizer_kind(optimizer, learning_rate: float, prepare_name: str) -> None:
    """AdamW, as the exercise asks, at the learning rate it was given (every parameter group)."""
    if not isinstance(optimizer, torch.optim.AdamW):
        raise CheckFailed(
            f"{prepare_name} returned a {type(optimizer).__name__} optimizer; the exercise asks for AdamW "
            "(torch.optim.AdamW), the optimizer the labs train adapters with: its decoupled weight decay is part "
            "of the recipe."
        )
    rates = sorted({group["lr"] for group in optimizer.param_groups})
    if any(not isinstance(rate, (int, float)) or not math.isclose(rate, learning_rate, rel_tol=1e-9) for rate in rates):
        shown = ", ".join(f"{rate:g}" if isinstance(rate, (int, float)) else repr(rate) for rate in rates)
        raise CheckFailed(
            f"Your optimizer's learning rate is {shown}, but {prepare_name} was given learning_rate={learning_rate:g}: "
            "use the argument, not a number of your own (the labs sweep it)."
        )


def _prepared(prepare_name, prepare_fn, model, learning_rate, expected: set[str]):
    """Call the student's prepare on ``model``; check the freezing and the optimizer it returns."""
    optimizer = call_answer(f"{prepare_name}(model, learning_rate={learning_rate:g})", prepare_fn, model, learning_rate,
                            may_change={0: REQUIRES_GRAD})
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise CheckFailed(
            f"{prepare_name} returned {type(optimizer).__name__}; it must return the optimizer it built "
            "(e.g. a torch.optim.AdamW)."
        )
    _check_frozen(model, expected)
    _check_optimizer_kind(optimizer, learning_rate, prepare_name)
    _check_optimizer_holds(model, optimizer)
    return optimizer


#: Models and learning rates drawn for the prepare half of lab 6's check.
DRAWN_PREPARATIONS = 20


def _drawn_preparation(case):
    """A fresh model of a drawn case, every tensor requiring grad, with what the freeze policy trains in it."""
    base, trained = _preparation_model(case[0])
    return copy.deepcopy(base), trained


@functools.cache
def _preparation_model(layers: int):
    """A model of ``layers`` layers, every tensor requiring grad, and its policy: built once a session per depth
    (hypothesis asks for the same depths again while it shrinks), handed out only as a copy."""
    model = _tiny_classifier(seed=layers, layers=layers)
    model.requires_grad_(True)
    return model, frozenset(_policy(model))


def _check_drawn_preparations(prepare_name: str, prepare_fn) -> None:
    """Draw depths and learning rates (1e-6 to 9e-1); show the smallest case the optimizer or the freezing is
    wrong on."""
    from hypothesis import strategies as st

    def fails(case) -> bool:
        model, expected = _drawn_preparation(case)
        optimizer = prepare_fn(model, case[1])
        _check_frozen(model, expected)
        _check_optimizer_kind(optimizer, case[1], prepare_name)
        _check_optimizer_holds(model, optimizer)
        return False

    rates = st.tuples(st.integers(1, 9), st.integers(-6, -1)).map(lambda pair: pair[0] * 10.0 ** pair[1])
    failing = smallest_failing(st.tuples(st.integers(1, 6), rates), fails, DRAWN_PREPARATIONS)
    if failing is not None:
        layers, learning_rate = failing
        model, expected = _drawn_preparation(failing)
        _drawn_case_failed(
            prepare_name, 2, f"{DRAWN_PREPARATIONS} drawn models and learning rates",
            f"{layers} layer{'s' * (layers > 1)}, learning_rate={learning_rate:g}",
            lambda: _prepared(prepare_name, prepare_fn, model, learning_rate, expected),
            "a learning rate or a number of layers written in")


def _policy(model) -> set[str]:
    """What the package's freeze policy trains in this model (the reference)."""
    policy = set_trainable(copy.deepcopy(model), "adapters")
    return {name for name, p in policy.named_parameters() if p.requires_grad}


def _fresh_gradients(model, batch, names: list[str], rng: torch.Tensor, mode: str = "train"):
    """The loss on the batch and its gradients for the named tensors, on a copy, by autograd, with dropout drawing
    from the random state ``rng``. ``mode``: "train" (the reference), "eval" (dropout off) or "unmasked" (no
    attention mask)."""
    twin = copy.deepcopy(model)
    twin.train(mode != "eval")
    parameters = dict(twin.named_parameters())
    given = {k: v for k, v in batch.items() if not (mode == "unmasked" and k == "attention_mask")}
    with torch.random.fork_rng(), torch.enable_grad():
        torch.set_rng_state(rng)
        loss = twin(**given).loss
        return loss.item(), list(torch.autograd.grad(loss, [parameters[n] for n in names]))


def _padded_batch(labels: list[int]) -> dict:
    """Rows of different lengths padded with 0 at the end, the attention mask marking the real tokens."""
    rows = len(labels)
    ids = _token_batch(60, rows, length=10)
    mask = torch.ones(rows, 10, dtype=torch.long)
    for row, length in enumerate([10, 6, 8, 4, 9, 5][:rows]):
        ids[row, length:] = 0
        mask[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask, "labels": torch.tensor(labels)}


def _same(grads, reference) -> bool:
    return all(close_enough(g, f) for g, f in zip(grads, reference))


def _step_mistake(model, batch, names, grads, seen: dict, step_name: str) -> str | None:
    """None when ``grads`` are the gradients of this batch's loss for one of the step's forwards with autograd on
    (training mode, mask used, at the dropout draw that forward consumed); otherwise what they are instead.

    Replaying each forward's own draw, rather than assuming which draw the step uses, accepts every correct step:
    one that logs with an extra no-grad forward, or draws random numbers of its own."""
    forwards, call = seen["forwards"], seen["call"]
    if not forwards:
        return (f"At step {call} optimizer.step() ran, but {step_name} called model(...) with autograd off only: the "
                "gradients it steps with come from elsewhere. Compute loss = model(**batch).loss with autograd on.")
    for forward in forwards:
        loss, fresh = _fresh_gradients(model, batch, names, forward["rng"])
        if _same(grads, fresh):
            seen["match"] = loss
            return None
    backwards = seen.get("backwards", 1)
    for forward in forwards:
        loss, fresh = _fresh_gradients(model, batch, names, forward["rng"])
        if backwards > 1 and _same(grads, [backwards * f for f in fresh]):
            return (f"At step {call} loss.backward() ran {backwards} times before optimizer.step(), and each adds "
                    f"this batch's gradients to .grad: they are {backwards} times this batch's loss's. Call "
                    "loss.backward() once a step.")
        if seen["previous"] is not None and _same(grads, [f + p for f, p in zip(fresh, seen["previous"])]):
            return (f"At step {call} the gradients are the sum of this step's and the previous step's: gradients "
                    "accumulate because they are never reset. Call optimizer.zero_grad() after optimizer.step() (or "
                    "before loss.backward()).")
        scale = _ratio(grads, fresh)
        if scale is not None:
            rows = len(batch["labels"])
            why = (f"your loss is summed over the batch's {rows} examples (reduction='sum', or the mean times the "
                   "batch size)" if math.isclose(scale, rows, rel_tol=1e-3) else "your loss is multiplied by a number")
            return (f"At step {call} the gradients point the right way but are {scale:.3g} times this batch's loss's: "
                    f"{why}. Train on model(**batch).loss as it comes, the mean over the batch, so that the learning "
                    "rate means what it says.")
        if not forward["training"] and _same(grads, _fresh_gradients(model, batch, names, forward["rng"], "eval")[1]):
            return (f"At step {call} the model ran in evaluation mode, so dropout was off: your code calls model.eval() "
                    "(or never model.train() after it). Training steps run the model in training mode.")
        if not forward["masked"] and _same(grads, _fresh_gradients(model, batch, names, forward["rng"], "unmasked")[1]):
            return (f"At step {call} the loss ignored the attention mask: the padding tokens were attended to as if "
                    "they were words. Pass the whole batch, model(**batch), attention_mask included.")
    return (f"At step {call} the gradients optimizer.step() sees are not those of this batch's loss (autograd on a copy "
            "of the model, replaying the dropout of each forward your step ran, disagrees). Likely causes: a loss "
            "computed from something other than model(**batch).loss (another batch, your own reduction), or "
            "gradients changed between loss.backward() and optimizer.step() (clipping, scaling, a second backward).")


def _ratio(grads, reference) -> float | None:
    """k when ``grads`` = k·``reference`` for one k ≠ 1 (a rescaled loss), else None."""
    flat_g = torch.cat([g.flatten().double() for g in grads])
    flat_f = torch.cat([f.flatten().double() for f in reference])
    norm = float(flat_f @ flat_f)
    if norm == 0:
        return None
    k = float(flat_g @ flat_f) / norm
    if math.isclose(k, 1.0, rel_tol=1e-3) or not _same(grads, [k * f for f in reference]):
        return None
    return k


def _check_returned_loss(step_name: str, returned, loss: float) -> None:
    """The step returns the loss it trained on as a number, not a tensor that keeps the batch's graph alive."""
    if isinstance(returned, torch.Tensor) and (returned.requires_grad or returned.grad_fn is not None):
        raise CheckFailed(
            f"{step_name} returns the loss tensor itself, which still holds its autograd graph (every activation of "
            "the batch): a loop that keeps the returned losses, e.g. in a list, keeps every batch's graph in memory. "
            "Return loss.item(), a plain number."
        )
    value = _as_float(returned)
    if value is None or not math.isclose(value, loss, rel_tol=1e-4, abs_tol=1e-6):
        raise CheckFailed(f"{step_name} returned {returned!r}; return the loss of the batch it trained on "
                          f"(here {loss:.4f}), as a number: loss.item().")


@plain_errors
def check_training_step(prepare_fn, step_fn) -> None:
    """Check lab 6's exercise on small random BERT classifiers with Houlsby adapters.

    ``prepare_fn(model, learning_rate) -> optimizer`` gets a model whose every tensor requires grad; it
    must freeze all but what the package's freeze policy trains (adapters, LayerNorms, classifier; the
    pretrained pooler stays frozen, as in adapter-bert) and return an AdamW optimizer at the given learning
    rate over exactly the trainable tensors, each once. Checked on a model with BERT-base's 12 layers and on
    the 3-layer model that then trains. ``step_fn(model, optimizer, batch) -> loss`` makes one training step.
    Checked over a few steps on one padded batch, with dropout on: each step sees the fresh gradient of its
    own loss (training mode, attention mask used, the mean over the batch, no accumulation; replayed with the
    dropout draw of the step's own forward, so extra forwards to log are fine), calls ``optimizer.step()``
    once, returns the loss as a number, leaves every frozen tensor bit-identical, and the loss falls.
    """
    prepare_name, step_name = getattr(prepare_fn, "__name__", "prepare"), getattr(step_fn, "__name__", "step")
    deep = _tiny_classifier(seed=5, layers=12)
    deep.requires_grad_(True)
    _prepared(prepare_name, prepare_fn, deep, 3e-4, _policy(deep))
    _check_drawn_preparations(prepare_name, prepare_fn)

    model = _tiny_classifier(seed=6, dropout=0.1).train()
    model.requires_grad_(True)  # as a freshly built model: nothing frozen yet
    expected = _policy(model)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    optimizer = _prepared(prepare_name, prepare_fn, model, TRAINING_LR, expected)

    names = sorted(expected)
    parameters = dict(model.named_parameters())
    batch = _padded_batch([0, 1, 1, 0, 1, 0])
    seen: dict = {"previous": None}

    def record_forward(module, args, kwargs):
        """Each forward with autograd on is a loss the step may train on: note its dropout draw and its inputs."""
        if torch.is_grad_enabled() and module is model:  # not the check's own copies, which carry this hook too
            seen["forwards"].append({"rng": torch.get_rng_state(), "training": module.training,
                                     "masked": kwargs.get("attention_mask") is not None or len(args) > 1})

    def count_backward(parameter):
        """Each backward that reaches a trained tensor adds its gradient to .grad: count them between steps."""
        if any(parameter is parameters[n] for n in names):  # not a copy's, should a copy carry the hook
            seen["accumulated"][id(parameter)] = seen["accumulated"].get(id(parameter), 0) + 1

    def inspect_gradients(optimizer, args, kwargs):
        """Runs inside optimizer.step(): are the gradients there, and are they this step's own?"""
        seen["steps"] += 1
        seen["backwards"], seen["accumulated"] = max(seen["accumulated"].values(), default=0), {}
        if seen["steps"] > 1:  # a second update in one call: said as such once the call returns
            return
        grads = [parameters[n].grad for n in names]
        if all(g is None for g in grads):
            seen.setdefault("problem", (
                f"{step_name} calls optimizer.step() while no tensor has a gradient: the loss was never "
                "backpropagated. Call loss.backward() before optimizer.step()."))
            return
        grads = [torch.zeros_like(parameters[n]) if g is None else g.detach().clone() for n, g in zip(names, grads)]
        problem = _step_mistake(model, batch, names, grads, seen, step_name)
        if problem:
            seen.setdefault("problem", problem)

    def eval_loss() -> float:
        mode = model.training
        model.eval()
        with torch.no_grad():
            value = model(**batch).loss.item()
        model.train(mode)
        return value

    first_loss = eval_loss()
    hooks = [optimizer.register_step_pre_hook(inspect_gradients),
             model.register_forward_pre_hook(record_forward, with_kwargs=True),
             *(parameters[n].register_post_accumulate_grad_hook(count_backward) for n in names)]
    try:
        for call in range(1, TRAINING_STEPS + 1):
            seen.update(call=call, steps=0, forwards=[], match=None, accumulated={})
            with torch.random.fork_rng():
                torch.manual_seed(600 + call)
                returned = call_answer(f"{step_name}(model, optimizer, batch)", step_fn, model, optimizer, dict(batch),
                                       may_change={0: WEIGHTS, 1: ANYTHING})
            if "problem" in seen:
                raise CheckFailed(seen["problem"])
            if seen["steps"] == 0:
                raise CheckFailed(
                    f"{step_name} never calls optimizer.step(): the gradients are computed but no parameter "
                    "moves. Call optimizer.step() after loss.backward()."
                )
            if seen["steps"] > 1:
                raise CheckFailed(f"{step_name} calls optimizer.step() {seen['steps']} times; one step means one update.")
            _check_returned_loss(step_name, returned, seen["match"])
            seen["previous"] = [parameters[n].grad.detach().clone() if parameters[n].grad is not None
                                else torch.zeros_like(parameters[n]) for n in names]
    finally:
        for hook in hooks:
            hook.remove()
    moved = [name for name in before if name not in expected and not torch.equal(before[name], parameters[name])]
    if moved:
        raise CheckFailed(f"{len(moved)} frozen tensors changed during training, e.g. {moved[0]}; frozen means untouched.")
    if not model.training:
        raise CheckFailed(f"After {step_name} the model is left in evaluation mode: a training step leaves it as it "
                          "found it, in training mode (the next step's dropout depends on it).")
    last_loss = eval_loss()
    if not last_loss < first_loss:
        raise CheckFailed(
            f"After {TRAINING_STEPS} steps the loss on the same batch went from {first_loss:.4f} to {last_loss:.4f}; "
            "it should fall. Check the optimizer's learning rate (use the one you are given)."
        )
    report_passed(
        f"Your training step is right: only the adapter, LayerNorm and classifier tensors train ({len(expected)} in "
        f"the 3-layer model, all 12 layers checked too, and {DRAWN_PREPARATIONS} drawn models and rates), AdamW at "
        "the given rate holds exactly those, each step uses "
        "its own fresh gradients (dropout on, padding masked), frozen tensors stay bit-identical, and the loss on "
        f"one batch falls over {TRAINING_STEPS} steps."
    )


# --------------------------------------------------------------------------------------------------
# Lab 7: the Matthews correlation
# --------------------------------------------------------------------------------------------------


def _correlation(labels: np.ndarray, predictions: np.ndarray) -> float:
    """The reference: Pearson's correlation of the two 0/1 vectors (it equals the MCC), 0 when one is constant."""
    x, y = labels - labels.mean(), predictions - predictions.mean()
    scale = math.sqrt(float(x @ x) * float(y @ y))
    return float(x @ y) / scale if scale > 0 else 0.0


#: CoLA's dev and train sizes: the four totals' product passes 2**31 there, so 32-bit counts overflow.
COLA_SIZES = (1043, 8551)
INT32_MAX = 2**31 - 1


def _matthews_cases():
    """(what, labels, predictions): random label sets of several sizes and balances, CoLA's own sizes (as 32-bit
    arrays, as a data loader may give them), then the corner cases."""
    generator = np.random.default_rng(7)
    cases = []
    for size, positive, agreement in [(40, 0.5, 0.8), (97, 0.7, 0.65), (250, 0.3, 0.55), (13, 0.6, 0.3)]:
        labels = (generator.random(size) < positive).astype(np.int64)
        predictions = np.where(generator.random(size) < agreement, labels, 1 - labels)
        cases.append((f"{size} random labels", labels, predictions))
    for size in COLA_SIZES:
        labels = (generator.random(size) < 0.69).astype(np.int32)
        predictions = np.where(generator.random(size) < 0.8, labels, 1 - labels).astype(np.int32)
        cases.append((f"{size} labels, CoLA's size, as int32 arrays", labels, predictions))
    labels = (generator.random(30) < 0.7).astype(np.int64)
    labels[:2] = [0, 1]
    cases += [
        ("a constant predictor (always 1)", labels, np.ones_like(labels)),
        ("a constant predictor (always 0)", labels, np.zeros_like(labels)),
        ("a perfect predictor", labels, labels.copy()),
        ("an inverted predictor", labels, 1 - labels),
        ("labels of one class only (no 0 at all)", np.ones(12, dtype=np.int64),
         (generator.random(12) < 0.5).astype(np.int64)),
        ("labels of one class only (no 1 at all)", np.zeros(12, dtype=np.int64),
         (generator.random(12) < 0.5).astype(np.int64)),
        ("perfect predictions of labels of one class only", np.ones(12, dtype=np.int64), np.ones(12, dtype=np.int64)),
        ("perfect predictions of labels that are all 0", np.zeros(12, dtype=np.int64), np.zeros(12, dtype=np.int64)),
    ]
    return cases


def _overflowed(value: float, labels, predictions) -> str | None:
    """The message for a score spoilt by 32-bit counts at CoLA's size, or None."""
    tp, tn, fp, fn = _counts(labels, predictions)
    product = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if product <= INT32_MAX:
        return None
    with np.errstate(all="ignore"):
        t = [np.int32(x) for x in (tp, tn, fp, fn)]
        wrapped = int((t[0] + t[2]) * (t[0] + t[3]) * (t[1] + t[2]) * (t[1] + t[3]))
    candidates = {float("nan")} | ({(tp * tn - fp * fn) / math.sqrt(wrapped)} if wrapped > 0 else set())
    if math.isnan(value) or math.isinf(value) or any(math.isclose(value, c, rel_tol=1e-6) for c in candidates):
        return (f"At CoLA's size (n = {len(labels):,}) the product under the root, (TP+FP)(TP+FN)(TN+FP)(TN+FN) = "
                f"{product:.2e}, is larger than a 32-bit integer holds ({INT32_MAX:,}): your counts are 32-bit "
                "(NumPy keeps int32 for int32 arrays) and the product overflows. Turn the counts into Python ints "
                "(int(...)) or floats before multiplying.")
    return None


def _counts(labels, predictions) -> tuple[int, int, int, int]:
    """TP, TN, FP, FN of 0/1 labels and predictions."""
    tp = int(np.sum((labels == 1) & (predictions == 1)))
    tn = int(np.sum((labels == 0) & (predictions == 0)))
    fp = int(np.sum((labels == 0) & (predictions == 1)))
    fn = int(np.sum((labels == 1) & (predictions == 0)))
    return tp, tn, fp, fn


def _mcc(tp: int, tn: int, fp: int, fn: int, root: bool = True, sign: int = -1) -> float | None:
    product = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if product == 0:
        return None
    return (tp * tn + sign * fp * fn) / (math.sqrt(product) if root else product)


def _rounded_mcc(tp: int, tn: int, fp: int, fn: int, digits: int) -> float | None:
    right = _mcc(tp, tn, fp, fn)
    return None if right is None else round(right, digits)


#: The catalogue's mistakes: what each computes from TP, TN, FP, FN (None where it has no value), and its message.
_MATTHEWS_MISTAKES = [
    (lambda tp, tn, fp, fn: (tp + tn) / (tp + tn + fp + fn), "You computed the accuracy, (TP + TN) / n. The "
     "Matthews correlation compares TP·TN with FP·FN and normalises by the four row and column totals."),
    (lambda tp, tn, fp, fn: _mcc(tp, tn, fp, fn, root=False), "The denominator is missing its square root: divide "
     "by √((TP+FP)(TP+FN)(TN+FP)(TN+FN))."),
    (lambda tp, tn, fp, fn: _mcc(tp, tn, fp, fn, sign=+1), "The numerator has the wrong sign: it is TP·TN − FP·FN "
     "(agreements minus disagreements)."),
    (lambda tp, tn, fp, fn: _mcc(tp, fn, fp, tn), "You swapped TN and FN: a true negative is a 0 label predicted 0, "
     "a false negative a 1 label predicted 0 (true/false says whether the prediction is right)."),
] + [
    (functools.partial(_rounded_mcc, digits=digits), f"You rounded the score to {digits} decimal places: return it "
     "as computed, and round only where you print it.")
    for digits in (4, 3, 2, 1)
]


def _matthews_mistake(matthews_fn, cases) -> str | None:
    """The catalogue's mistake whose value the answer returns on every case of ``cases`` where the mistake and the
    right score differ, or None. A match on the one failing case is not enough: 2·accuracy − 1 equals the score
    rounded to 2 decimals on some inputs, and would be told it rounded. The answer is called again, plainly (it
    has passed the audit on the cases before the failing one)."""
    answers = []
    for _, labels, predictions in cases:
        try:
            with np.errstate(all="ignore"):
                answers.append(_as_float(matthews_fn(labels.copy(), predictions.copy())))
        except Exception:
            answers.append(None)
    for mistake, message in _MATTHEWS_MISTAKES:
        compared = 0
        for (_, labels, predictions), got in zip(cases, answers):
            counts = _counts(labels, predictions)
            wrong, right = mistake(*counts), _mcc(*counts)
            if wrong is None or right is None or math.isclose(wrong, right, rel_tol=1e-6, abs_tol=1e-9):
                continue  # the mistake is not told apart on this case
            if got is None or not math.isclose(got, wrong, rel_tol=1e-6, abs_tol=1e-9):
                break
            compared += 1
        else:
            if compared:
                return message
    return None


_PACKAGE_MATTHEWS = PackageAnswer((matthews,), (
    "Your answer calls the package's matthews: that is the computation this exercise asks you to write. Count the "
    "four kinds of outcome and combine them yourself."))


_ZERO_WHEN_UNDEFINED = (
    "When a class is missing (a constant predictor, or labels of one class) the denominator is 0; the Matthews "
    "correlation is then defined as 0: return 0.0 instead of dividing.")


def _check_one_matthews(name: str, matthews_fn, what: str, labels, predictions, named: bool = True) -> None:
    """Check one pair of label and prediction arrays, in full (the audit around the call); name a mistake of the
    catalogue only where ``named`` and the answer makes it on every fixed case (a drawn pair is checked once the
    fixed ones passed)."""
    expected = _correlation(labels.astype(np.float64), predictions.astype(np.float64))
    degenerate = len(set(labels.tolist())) < 2 or len(set(predictions.tolist())) < 2
    call = f"{name}(labels, predictions) for {what}"
    with np.errstate(all="ignore"):
        got = call_answer(call, matthews_fn, labels.copy(), predictions.copy(),
                          hint=_ZERO_WHEN_UNDEFINED if degenerate else "", package=_PACKAGE_MATTHEWS)
    value = _as_float(got)
    if value is None:
        raise CheckFailed(f"{call} returned {got!r}; return the score as one number (a float).")
    overflow = None if degenerate or math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9) else _overflowed(
        value, labels, predictions)
    if overflow:
        raise CheckFailed(f"{call} returned {value:.4f}; the Matthews correlation is {expected:.4f}. {overflow}")
    if math.isnan(value) or math.isinf(value):
        raise CheckFailed(f"{call} returned {value}. {_ZERO_WHEN_UNDEFINED if degenerate else 'Return a finite number.'}")
    if math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9):
        return
    problem = _ZERO_WHEN_UNDEFINED if degenerate else _matthews_mistake(
        matthews_fn, [case for case in _matthews_cases()
                      if len(set(case[1].tolist())) == 2 and len(set(case[2].tolist())) == 2]) if named else None
    raise CheckFailed(f"{call} returned {value:.4f}; the Matthews correlation is {expected:.4f}. "
                      + (problem or "Count TP, TN, FP and FN from the two arrays, then apply the formula. "
                                    "Likely causes: 0 taken as the positive class (1 = acceptable is), a count "
                                    "mixed up, or the numerator or root written differently from "
                                    "(TP·TN − FP·FN) / √((TP+FP)(TP+FN)(TN+FP)(TN+FN))."))


#: How many label sets the check draws beyond its fixed ones (hypothesis, derandomized: the same every run).
DRAWN_LABEL_SETS = 100


def _drawn_label_sets():
    """(labels, predictions): 1 to 60 pairs of 0/1 values as int64 arrays. A failing pair shrinks to the fewest
    and smallest values that still fail."""
    from hypothesis import strategies as st

    pairs = st.lists(st.tuples(st.integers(0, 1), st.integers(0, 1)), min_size=1, max_size=60)
    return pairs.map(lambda drawn: (np.array([label for label, _ in drawn], dtype=np.int64),
                                    np.array([prediction for _, prediction in drawn], dtype=np.int64)))


@plain_errors
def check_matthews(matthews_fn) -> None:
    """Check ``matthews_fn(labels, predictions) -> float`` for 0/1 NumPy arrays (lab 7).

    The reference is Pearson's correlation of the label and prediction vectors (equal to the MCC for
    two classes, computed without the confusion counts), taken as 0 when either vector is constant,
    as scikit-learn's ``matthews_corrcoef`` does. After the fixed cases, hypothesis draws label sets.
    """
    name = getattr(matthews_fn, "__name__", "matthews")
    for what, labels, predictions in _matthews_cases():
        _check_one_matthews(name, matthews_fn, what, labels, predictions)

    def fails(case) -> bool:  # the answer alone, unaudited: hypothesis calls it hundreds of times while shrinking
        labels, predictions = case
        value = _as_float(matthews_fn(labels.copy(), predictions.copy()))
        expected = _correlation(labels.astype(np.float64), predictions.astype(np.float64))
        return value is None or not math.isclose(value, expected, rel_tol=1e-6, abs_tol=1e-9)

    failing = smallest_failing(_drawn_label_sets(), fails, DRAWN_LABEL_SETS)
    if failing is not None:
        labels, predictions = failing
        _check_one_matthews(name, matthews_fn, f"the drawn labels {labels.tolist()} and predictions "
                            f"{predictions.tolist()}", labels, predictions, named=False)
    report_passed("Your Matthews correlation matches the correlation of labels and predictions on 4 random label sets "
            "and at CoLA's sizes (1,043 and 8,551), and gives 0 for a constant predictor and labels of either class alone, 1 when "
            f"perfect, −1 when inverted; and on {DRAWN_LABEL_SETS} drawn label sets.")


# --------------------------------------------------------------------------------------------------
# Lab 8: the span-ablation loop
# --------------------------------------------------------------------------------------------------

#: The depths of the check's models: BERT-base's 12 layers (78 spans, and layer numbers with two digits), then 5,
#: so that a loop written for 12 layers shows.
ABLATION_LAYERS = 12
OTHER_DEPTH = 5


class _EvaluationFailed(RuntimeError):
    """Raised by the check's score function on purpose, to see whether the loop restores the model."""


_PACKAGE_ABLATION = ("Your loop calls the package's span_ablation: that is the loop this exercise asks you to write "
                     "(the check compares with it). Switch the spans off and on yourself.")


def _called_by_package_ablation() -> bool:
    """Whether adapterlab's own span_ablation is on the call stack."""
    target = span_ablation.__code__
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code is target:
            return True
        frame = frame.f_back
    return False


def _score_fn(batch: torch.Tensor, fail_at: int | None = None, student: bool = False, stop=None):
    """A stand-in for an evaluation: a number that depends on which adapters are on (the logits' mean). With
    ``student``, it refuses to be called from the package's own span_ablation; with ``fail_at``, its call of that
    number raises ``stop`` (an evaluation error unless told otherwise)."""
    calls = {"n": 0}

    def score(model) -> float:
        if student and _called_by_package_ablation():
            from .checks import Forbidden

            raise Forbidden(_PACKAGE_ABLATION)
        calls["n"] += 1
        if fail_at is not None and calls["n"] == fail_at:
            raise (stop or _EvaluationFailed)("the evaluation stopped halfway through the loop (raised by the check "
                                              "on purpose)")
        with torch.no_grad():
            return float(model(input_ids=batch).logits.mean(dim=0) @ torch.tensor([1.0, -0.5]))

    return score


def _variant_scores(model, score, spans_off, restore: bool) -> dict:
    """Scores of a (possibly wrong) loop on a copy of ``model``: ``spans_off(i, j)`` layers are switched off
    for span (i, j), and switched back on after each evaluation only when ``restore``."""
    twin = copy.deepcopy(model)
    out = {}
    layers = len(encoder_layers(model))
    for i in range(layers):
        for j in range(i, layers):
            if spans_off(i, j):
                set_adapters_enabled(twin, False, layers=spans_off(i, j))
            out[i, j] = score(twin)
            if restore:
                set_adapters_enabled(twin, True)
    return out


def _zeroed_up_scores(model, score) -> dict:
    """Scores of the loop that "switches off" span (i, j) by zeroing the W_up of its layers' adapters."""
    twin = copy.deepcopy(model)
    ups = [(int(name.split(".")[3]), parameter) for name, parameter in twin.named_parameters()
           if name.endswith(".adapter.up.weight")]
    saved = [parameter.detach().clone() for _, parameter in ups]
    out = {}
    layers = len(encoder_layers(model))
    with torch.no_grad():
        for i in range(layers):
            for j in range(i, layers):
                for layer, parameter in ups:
                    if i <= layer <= j:
                        parameter.zero_()
                out[i, j] = score(twin)
                for (_, parameter), weight in zip(ups, saved):
                    parameter.copy_(weight)
    return out


def _model_state(model) -> dict:
    """Everything about a model a loop over it must give back besides its tensors and its enabled adapters."""
    return {"grad": torch.is_grad_enabled(),
            "training": {name: m.training for name, m in model.named_modules()},
            "requires_grad": {name: p.requires_grad for name, p in model.named_parameters()},
            "hooks": {name: hook_count(m) for name, m in model.named_modules()}}


def _state_change(before: dict, after: dict, when: str = "") -> str | None:
    """What a loop left changed, in words, or None."""
    if after["grad"] != before["grad"]:
        return (f"{when}Your loop leaves autograd switched {'off' if before['grad'] else 'on'} for everything that runs "
                "after it (torch.set_grad_enabled(...) without putting it back): every later training cell would "
                "silently compute no gradients. score(model) already evaluates without gradients; leave grad mode alone, "
                "or use `with torch.no_grad():`, which restores it.")
    modes = [name for name, mode in before["training"].items() if after["training"].get(name) != mode]
    if modes:
        left = "evaluation" if before["training"][modes[0]] else "training"
        return (f"{when}Your loop leaves the model in {left} mode (model.{'eval' if left == 'evaluation' else 'train'}()): "
                f"it came in {'training' if left == 'evaluation' else 'evaluation'} mode, and a restore means every "
                "module's mode as it was. Remember model.training and put it back in a `finally:` block.")
    flags = [name for name, flag in before["requires_grad"].items() if after["requires_grad"].get(name) != flag]
    if flags:
        return (f"{when}Your loop changes which tensors require grad ({len(flags)} of them, e.g. {flags[0]}): "
                "switching adapters off is set_adapters_enabled's job; leave requires_grad as it was.")
    hooks = [name or "the model" for name, count in after["hooks"].items() if count != before["hooks"].get(name, 0)]
    if hooks:
        return (f"{when}Your loop leaves hooks registered on {hooks[0]}{' and other modules' if len(hooks) > 1 else ''}: "
                "they run at every later forward pass. Remove every hook you register (handle.remove()) in a "
                "`finally:` block.")
    return None


def _ablation_mistake(model, score, values: dict, expected: dict, left_off: list[int]) -> str:
    """What a loop whose scores are ``values`` did wrong, in words (``model`` is as it came in)."""
    def same(scores: dict) -> bool:
        return all(math.isclose(values[s], scores[s], rel_tol=1e-5, abs_tol=1e-6) for s in expected)

    every_layer = list(range(len(encoder_layers(model))))
    if same(_variant_scores(model, score, lambda i, j: every_layer, restore=True)):
        return "Every span scored like the model with all adapters off: switch off only the layers i..j of the span."
    if same(_zeroed_up_scores(model, score)):
        return ("You switched adapters off by zeroing W_up, but b_up still adds its constant to every token, so the "
                "adapter is not off (a trained adapter's b_up is not zero). Switch adapters off with "
                "set_adapters_enabled(model, False, layers=...), which skips them whole.")
    if any(same(_variant_scores(model, score, lambda i, j: list(range(i, j)), restore)) for restore in (True, False)):
        return ("Your spans stop one layer short: the span (i, j) includes layer j, so switch off range(i, j + 1); "
                "the span (i, i) switches off layer i.")
    if left_off or same(_variant_scores(model, score, lambda i, j: list(range(i, j + 1)), restore=False)):
        return ("The adapters switched off for one span stay off while the next span is evaluated: switch every "
                "adapter back on right after each evaluation, not only at the end.")
    worst = max(expected, key=lambda s: abs(values[s] - expected[s]))
    return (f"Your score for span {worst} is {values[worst]:.5f}; with the adapters of layers {worst[0]}..{worst[1]} "
            f"off (and all others on) the model scores {expected[worst]:.5f}. Likely causes: spans keyed (j, i) or "
            "by another numbering, layers switched off other than i..j, or something else stored than score(model).")


def _spans(layers: int) -> int:
    return layers * (layers + 1) // 2


def _ablation_model(layers: int = ABLATION_LAYERS):
    """A model of ``layers`` layers with big adapters whose biases are non-zero too: each span's score shows, and an
    adapter "switched off" by zeroing W_up alone still adds b_up, as a trained adapter would."""
    model = _tiny_classifier(seed=8, layers=layers, init_scale=0.3)
    generator = torch.Generator().manual_seed(81)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".adapter." in name and name.endswith(".bias"):
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    return model


def _ablation_batch() -> torch.Tensor:
    return _token_batch(80, 5)


@functools.cache
def _reference_ablation(layers: int):
    """(the check's model of ``layers`` layers, the package's score of each of its spans): the same every call, so
    made once a session (a check run again after an edit reads them). The model is only ever handed out copied."""
    base = _ablation_model(layers)
    reference_score = _score_fn(_ablation_batch())
    reference = span_ablation(copy.deepcopy(base), None, metric="score", progress=False,
                              evaluate=lambda m, data, batch_size, device: {"score": reference_score(m)})
    return base, {(i, j): float(reference.scores[i, j]) for i in range(layers) for j in range(i, layers)}


class _Interrupted(KeyboardInterrupt):
    """The check's own Ctrl-C, raised by its score function on purpose."""


#: How the check's score function stops the loop halfway: an error, and a Ctrl-C (not an Exception).
_STOPS = {
    _EvaluationFailed: "When score(model) raised an error halfway: ",
    _Interrupted: ("When score(model) was interrupted halfway (Ctrl-C raises KeyboardInterrupt, which is not an "
                   "Exception, so `except Exception:` does not catch it): "),
}


@plain_errors
def check_span_ablation(ablate_fn) -> None:
    """Check ``ablate_fn(model, score) -> {(i, j): score}`` (lab 8) against :func:`adapterlab.ablation.span_ablation`.

    For every span 0 ≤ i ≤ j < L the adapters of layers i..j (inclusive) are switched off, ``score(model)``
    is taken, and they are switched back on; afterwards the model must be exactly as it came in (every
    adapter on, every tensor and output bit-identical, each module's mode, requires_grad flags, hooks and grad
    mode as they were), even when ``score`` raises halfway, an error or a Ctrl-C. The model has BERT-base's 12
    layers (78 spans), adapters with non-zero biases, and comes in training mode (as right after training),
    then in evaluation mode, so that a loop that ends in either mode whatever it was given shows; then a model of
    5 layers, so that a loop written for 12 shows.
    """
    name = getattr(ablate_fn, "__name__", "ablate")
    batch = _ablation_batch()
    for layers in (ABLATION_LAYERS, OTHER_DEPTH):
        base, expected = _reference_ablation(layers)
        for training in (True, False):
            _check_one_ablation(name, ablate_fn, copy.deepcopy(base).train(training), batch, expected)
    base, _ = _reference_ablation(ABLATION_LAYERS)
    for stop, when in _STOPS.items():
        _check_stopped_ablation(name, ablate_fn, copy.deepcopy(base).train(), batch, stop, when)
    _check_drawn_depths(name, ablate_fn, batch)
    report_passed(
        f"Your span ablation matches adapterlab.ablation on all {_spans(ABLATION_LAYERS)} spans of a "
        f"{ABLATION_LAYERS}-layer model and all {_spans(OTHER_DEPTH)} of a {OTHER_DEPTH}-layer one, and leaves the "
        "model as it came (tensors, outputs, modes, flags, hooks), in "
        "training mode and in evaluation mode, even when the evaluation fails or is interrupted; and so on "
        f"{DRAWN_DEPTHS} drawn models of 1 to {DRAWN_MAX_DEPTH} layers."
    )


#: Models drawn for the span-ablation check: few (each is a whole loop), from one layer, where one span is all.
DRAWN_DEPTHS, DRAWN_MAX_DEPTH = 6, 8


def _check_drawn_depths(name: str, ablate_fn, batch) -> None:
    """Draw depths and modes; show the shallowest model whose spans the answer scores wrong or leaves changed."""
    from hypothesis import strategies as st

    def fails(case) -> bool:
        layers, training = case
        base, expected = _reference_ablation(layers)
        model = copy.deepcopy(base).train(training)
        got = ablate_fn(model, _score_fn(batch, student=True))
        return (not isinstance(got, dict) or set(got) != set(expected)
                or any(not math.isclose(_as_float(got[s]), expected[s], rel_tol=1e-5, abs_tol=1e-6) for s in expected)
                or enabled_layers(model) != list(range(layers)) or model.training != training)

    failing = smallest_failing(st.tuples(st.integers(1, DRAWN_MAX_DEPTH), st.booleans()), fails, DRAWN_DEPTHS)
    if failing is not None:
        layers, training = failing
        base, expected = _reference_ablation(layers)
        _drawn_case_failed(
            "your loop", 4, f"{DRAWN_DEPTHS} drawn models", f"{layers} layer{'s' * (layers > 1)} in "
            f"{'training' if training else 'evaluation'} mode",
            lambda: _check_one_ablation(name, ablate_fn, copy.deepcopy(base).train(training), batch, expected),
            "a number of layers written in, or a range that misses the first or the last layer")


def _check_one_ablation(name: str, ablate_fn, model, batch, expected: dict) -> None:
    """One full run: the scores, then everything the loop must give back."""
    pristine = copy.deepcopy(model)
    state = _model_state(model)
    score = _score_fn(batch, student=True)
    layers = len(encoder_layers(model))
    with torch.no_grad():
        outputs = model(input_ids=batch).logits
    try:
        depth = f"{layers} layer{'s' * (layers > 1)}"
        got = call_answer(f"{name}(model, score) on a model of {depth}", ablate_fn, model, score,
                          may_change={0: ANYTHING},  # the restore is this check's subject: named below
                          hint=f"This model has {depth}: does your loop take their number from the model?")
    finally:
        grad_after = torch.is_grad_enabled()
        torch.set_grad_enabled(state["grad"])  # whatever the answer did, the notebook gets its grad mode back
    changed = _state_change(state, dict(_model_state(model), grad=grad_after))
    if not isinstance(got, dict) or set(got) != set(expected):
        shown = sorted(got)[:4] if isinstance(got, dict) else type(got).__name__
        depth = next((n for n in range(1, 4 * ABLATION_LAYERS) if isinstance(got, dict) and set(got) == {
            (i, j) for i in range(n) for j in range(i, n)}), layers)
        raise CheckFailed(
            f"{name} must return a dict with one score per span, keyed (i, j) for 0 ≤ i ≤ j < {layers} "
            f"({len(expected)} spans); it returned {shown}{' ...' if isinstance(got, dict) and len(got) > 4 else ''}."
            + (f" Those are the spans of {depth} layers, and this model has {layers}: take the number of layers "
               "from the model, len(encoder_layers(model))." if depth != layers else "")
        )
    values = {span: _as_float(value) for span, value in got.items()}
    if any(value is None for value in values.values()):
        raise CheckFailed(f"{name} must store what score(model) returned for each span (a number).")
    left_off = sorted(set(range(layers)) - set(enabled_layers(model)))
    if any(not math.isclose(values[s], expected[s], rel_tol=1e-5, abs_tol=1e-6) for s in expected):
        raise CheckFailed(_ablation_mistake(pristine, score, values, expected, left_off))
    if left_off:
        raise CheckFailed(f"After your loop the adapters of layers {left_off} are still off: switch them back on.")
    if changed:
        raise CheckFailed(changed)
    with torch.no_grad():
        unchanged = torch.equal(model(input_ids=batch).logits, outputs)
    tensors = pristine.state_dict()
    if not unchanged or any(not torch.equal(v, tensors[k]) for k, v in model.state_dict().items()):
        raise CheckFailed("After your loop the model's weights or outputs differ from before: switch adapters off "
                          "and on with set_adapters_enabled; do not change or remove any tensor.")


def _check_stopped_ablation(name: str, ablate_fn, model, batch, stop, when: str) -> None:
    """A run whose score raises ``stop`` at its third call: the loop must let it through and restore everything."""
    state = _model_state(model)
    try:
        call_answer(f"{name}(model, score)", ablate_fn, model, _score_fn(batch, fail_at=3, student=True, stop=stop),
                  may_change={0: ANYTHING})  # the restore is this check's subject: named below
    except _Interrupted:
        pass
    except CheckFailed as error:
        if not isinstance(error.__cause__, _EvaluationFailed):
            raise
    else:
        raise CheckFailed(f"{when}{name} carried on as if nothing had happened; let the error reach the caller "
                          "(try/finally, without except).")
    finally:
        grad_after = torch.is_grad_enabled()
        torch.set_grad_enabled(state["grad"])
    still_off = sorted(set(range(len(encoder_layers(model)))) - set(enabled_layers(model)))
    if still_off:
        raise CheckFailed(f"{when}your loop left the adapters of layers {still_off} switched off. Switch them back on "
                          "in a `finally:` block, which runs whatever happens.")
    changed = _state_change(state, dict(_model_state(model), grad=grad_after), when=when)
    if changed:
        raise CheckFailed(changed)


# --------------------------------------------------------------------------------------------------
# Lab 9: one backbone, many tasks
# --------------------------------------------------------------------------------------------------

SERVING_TASKS = ("sentiment", "grammar", "topic")
#: The task of each request, in arrival order: mixed, with the groups interleaved.
SERVING_ORDER = ("grammar", "sentiment", "grammar", "topic", "sentiment", "sentiment", "topic", "grammar")


def _serving_case(directory: Path):
    """A tiny model, three saved adapter sets (random, so that each task answers differently) and requests."""
    base = _tiny_classifier(seed=9, layers=3, dropout=0.1)  # in evaluation mode, as served; dropout there to show
    sets = {}
    with torch.random.fork_rng():
        torch.manual_seed(90)
        for task in SERVING_TASKS:
            model = copy.deepcopy(base)
            with torch.no_grad():
                for tensor in saved_parameters(model).values():
                    tensor.add_(torch.randn_like(tensor), alpha=0.2)
            sets[task] = save_adapter_set(model, directory / task)
    requests = [(task, row) for task, row in zip(SERVING_ORDER, _token_batch(91, len(SERVING_ORDER), length=6))]
    server = copy.deepcopy(base)
    load_adapter_set(server, sets["topic"])  # the set a previous request left loaded
    return base, sets, requests, server


_OPENED: dict = {"log": None}


def _audit(event: str, args) -> None:
    """Python's audit hook: while a log is open, note the path of every file opened."""
    log = _OPENED["log"]
    if log is not None and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        log.append(os.fsdecode(args[0]))


@contextlib.contextmanager
def _files_opened():
    """The paths of the files opened inside (an audit hook, added once per process; it costs nothing while closed)."""
    if not _OPENED.get("installed"):
        sys.addaudithook(_audit)
        _OPENED["installed"] = True
    log: list[str] = []
    _OPENED["log"] = log
    try:
        yield log
    finally:
        _OPENED["log"] = None


def _loads(log: list[str], sets: dict) -> int:
    """How many times an adapter set's config was read: once per load_adapter_set (calibrated by the caller)."""
    configs = {str(Path(folder) / CONFIG_FILE) for folder in sets.values()}
    return sum(path in configs for path in log)


@plain_errors
def check_serving(serve_fn) -> None:
    """Check ``serve_fn(model, adapter_sets, requests) -> outputs`` (lab 9).

    ``requests`` is a list of (task, input_ids) with input_ids of equal length; ``adapter_sets`` maps each
    task to its saved adapter set. The answer must hold one row of logits per request, in request order,
    each equal to what a separate model with that task's set loaded answers, with one forward pass and one
    adapter-set load per task, and each request's row run through the model once.
    """
    name = getattr(serve_fn, "__name__", "serve")
    with tempfile.TemporaryDirectory(prefix="adapterlab-check-") as folder:
        _check_serving_in(Path(folder), name, serve_fn)


def _check_serving_in(folder: Path, name: str, serve_fn) -> None:
    """:func:`check_serving`, with its adapter sets saved in ``folder``: the fixed mixed requests, then drawn ones."""
    base, sets, requests, server = _serving_case(folder)
    served = _task_models(base, sets)
    _check_serving_case(name, serve_fn, base, sets, requests, server, served)

    def fails(case) -> bool:
        drawn, model = _drawn_serving(served, case)
        rows = _rows(serve_fn(model, dict(sets), list(drawn)), len(drawn))
        return rows is None or not all(
            close_enough(row, _served(served, task, ids)) for row, (task, ids) in zip(rows, drawn))

    failing = smallest_failing(_drawn_servings(), fails, DRAWN_SERVINGS)
    if failing is not None:
        order, loaded, length = failing
        _drawn_case_failed(
            "your server", 1, f"{DRAWN_SERVINGS} drawn request lists",
            f"{len(order)} request{'s' * (len(order) > 1)} of {length} tokens for {', '.join(order)}, with the "
            f"{loaded!r} set loaded",
            lambda: _check_serving_case(name, serve_fn, base, sets, *_drawn_serving(served, failing), served),
            "a count of requests or tasks written in, a group of one request (squeeze() drops its row), or a task "
            "with no requests")
    report_passed(
        f"Your server answers {len(requests)} mixed requests for {len(SERVING_TASKS)} tasks exactly as one model per "
        f"task would, in request order, with one adapter-set swap and one forward pass per task, and so do "
        f"{DRAWN_SERVINGS} drawn request lists (1 to {DRAWN_REQUESTS} requests, any mix of tasks)."
    )


#: Request lists drawn for the serving check, each of 1 to DRAWN_REQUESTS requests.
DRAWN_SERVINGS, DRAWN_REQUESTS = 25, 10


def _drawn_servings():
    """(tasks of the requests in arrival order, the set loaded before, tokens per request) drawn by hypothesis; a
    failing case shrinks to the fewest requests."""
    from hypothesis import strategies as st

    return st.tuples(st.lists(st.sampled_from(SERVING_TASKS), min_size=1, max_size=DRAWN_REQUESTS),
                     st.sampled_from(SERVING_TASKS), st.integers(2, 8))


def _drawn_serving(served: dict, case):
    """The requests of a drawn case, and a copy of the model holding the set the case says was loaded."""
    order, loaded, length = case
    return list(zip(order, _token_batch(92, len(order), length=length))), copy.deepcopy(served[loaded])


def _task_models(base, sets) -> dict:
    """One copy of the model per task with that task's set loaded: what a separate model per task answers."""
    models = {task: copy.deepcopy(base) for task in SERVING_TASKS}
    for task, model in models.items():
        load_adapter_set(model, sets[task])
    return models


def _served(models: dict, task: str, ids) -> torch.Tensor:
    with torch.no_grad():
        return models[task](input_ids=ids[None]).logits[0]


def _check_serving_case(name: str, serve_fn, base, sets, requests, server, served) -> None:
    """One list of requests served by the answer, in full: the rows, and how they were computed."""
    reference = {task: [_served(served, task, ids) for _, ids in requests] for task in SERVING_TASKS}
    with _files_opened() as log:
        load_adapter_set(copy.deepcopy(base), sets["grammar"])
    per_load = max(1, _loads(log, sets))
    passes = {"n": 0, "rows": 0, "copies": 0, "training": 0}

    def count(module, args, kwargs):
        passes["n"] += 1
        passes["copies"] += module is not server  # a copy of the model carries this hook along
        passes["training"] += module.training
        ids = kwargs.get("input_ids", args[0] if args else None)
        passes["rows"] += int(ids.shape[0]) if isinstance(ids, torch.Tensor) and ids.ndim == 2 else 1

    counter = server.register_forward_pre_hook(count, with_kwargs=True)
    try:
        with _files_opened() as log:
            got = call_answer(f"{name}(model, adapter_sets, requests)", serve_fn, server, dict(sets), list(requests),
                              may_change={0: WEIGHTS})
    finally:
        counter.remove()
    loads = _loads(log, sets) // per_load
    if passes["copies"]:
        raise CheckFailed(
            f"{passes['copies']} of your forward passes ran on a copy of the model (copy.deepcopy per task?): every "
            "copy holds the whole backbone again (110 M parameters for BERT-base, per task), where the point is one "
            "shared backbone. Load each task's adapter set into the model you are given and run its group there."
        )
    if passes["training"]:
        raise CheckFailed(
            f"{passes['training']} of your forward passes ran in training mode (model.train()), so dropout changed "
            "the answers at random. The model comes in evaluation mode: serve in it, and leave the mode alone."
        )
    if _holds_graph(got):
        raise CheckFailed(
            "Your logits still hold their autograd graph: serving needs no gradients, and the graph keeps every "
            "activation of the batch in memory. Run each forward pass under torch.inference_mode() (or "
            "torch.no_grad())."
        )
    rows = _rows(got, len(requests))
    if rows is None:
        raise CheckFailed(f"{name} must return one row of logits per request ({len(requests)} rows of 2 numbers), "
                          f"as a list of tensors or one tensor; it returned {type(got).__name__}.")
    truth = [reference[task][k] for k, (task, _) in enumerate(requests)]
    if all(close_enough(row, want) for row, want in zip(rows, truth)):
        tasks_used = len({task for task, _ in requests})
        if passes["n"] > tasks_used:
            raise CheckFailed(
                f"The answers are right, but you ran {passes['n']} forward passes for {tasks_used} tasks: batch each "
                "task's requests together, so that each adapter set is loaded and run once."
            )
        if passes["rows"] > len(requests):
            raise CheckFailed(
                f"The answers are right, but your forward passes ran {passes['rows']} rows for {len(requests)} "
                "requests: each pass should hold only its task's requests, so that every request is computed once."
            )
        if loads > tasks_used:
            raise CheckFailed(
                f"The answers are right, but you loaded adapter sets {loads} times for {tasks_used} tasks: a load "
                "copies every tensor of the set into the model, so load each task's set once, before its group."
            )
        _serve_again(name, serve_fn, base, sets, requests, server, reference, served)
        return
    raise CheckFailed(_serving_mistake(rows, requests, reference))


def _loaded_set(model, served: dict) -> str | None:
    """The task whose adapter set ``model`` holds now (compared with the models that serve each task), or None."""
    held = saved_parameters(model)
    for task in SERVING_TASKS:
        if all(torch.equal(tensor, held[name]) for name, tensor in saved_parameters(served[task]).items()):
            return task
    return None


def _serve_again(name, serve_fn, base, sets, requests, server, reference, served) -> None:
    """Call a server that answered right once again, as a notebook does with the next batch of requests: on a model
    holding another set than the first call left loaded, with the requests of the task it left loaded first. An
    answer that keeps which set is loaded between calls (in a global or a default argument) answers from that
    memory, and wrongly."""
    last = _loaded_set(server, served) or requests[-1][0]
    model = copy.deepcopy(base)
    load_adapter_set(model, sets[next(task for task in SERVING_TASKS if task != last)])
    order = sorted(range(len(requests)), key=lambda k: requests[k][0] != last)  # stable: `last` first
    got = call_answer(f"{name}(model, adapter_sets, requests) called again", serve_fn, model, dict(sets),
                      [requests[k] for k in order], may_change={0: WEIGHTS})
    rows = _rows(got, len(requests))
    if rows is None or not all(close_enough(row, reference[requests[k][0]][k]) for row, k in zip(rows, order)):
        raise CheckFailed(
            f"Your server answered right when first called, and wrong when called again on a model holding another "
            f"adapter set, with the {last!r} requests first: it keeps something from the last call (which set it "
            "loaded, in a global variable or a default argument) that the model it is given does not hold. Decide "
            "from the model and the requests you are given: load each group's set, every call."
        )


def _holds_graph(got) -> bool:
    """Whether a tensor, or a list of them, still records autograd history."""
    tensors = [got] if isinstance(got, torch.Tensor) else list(got) if isinstance(got, (list, tuple)) else []
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in tensors)


def _rows(got, count: int):
    if isinstance(got, torch.Tensor) and got.ndim == 2 and len(got) == count:
        return [row.detach().float() for row in got]
    if isinstance(got, (list, tuple)) and len(got) == count and all(
            isinstance(row, torch.Tensor) and row.shape == (2,) for row in got):
        return [row.detach().float() for row in got]
    return None


def _serving_mistake(rows, requests, reference) -> str:
    """What a wrong list of answers did instead, in words."""
    for task in SERVING_TASKS:
        if all(close_enough(row, reference[task][k]) for k, row in enumerate(rows)):
            return (f"Every request was answered with the {task!r} adapter set: load each task's own set before "
                    "running its requests.")
    origin = []  # for each row: (request index, task) of the reference it equals, if any
    for row in rows:
        origin.append(next(((k, task) for task in SERVING_TASKS for k in range(len(requests))
                            if close_enough(row, reference[task][k])), None))
    if all(o is not None and requests[o[0]][0] == o[1] for o in origin) and any(
            o[0] != k for k, o in enumerate(origin)):
        return ("Each answer is right for some request, but they come back in grouped order: put each group's "
                "outputs back at the positions its requests had in the list.")
    for k, o in enumerate(origin):
        if o is not None and o[0] == k and o[1] != requests[k][0]:
            return (f"Request {k} ({requests[k][0]!r}) was answered with the {o[1]!r} adapter set, still loaded from "
                    "before: load a group's adapter set before running that group.")
    return ("Your outputs differ from what one model per task answers; for each task load its adapter set "
            "(load_adapter_set), run its requests, and store each output at its request's position. Likely causes: "
            "rows stacked in another order than their positions, a set loaded for the wrong group, or the logits "
            "changed after the forward pass (a softmax, a rounding).")


# --------------------------------------------------------------------------------------------------
# Lab 10: the Pareto front of accuracy against trained parameters
# --------------------------------------------------------------------------------------------------


def _dominated(label, points: dict) -> bool:
    """The reference, pairwise: another point has at most as many parameters and at least the score, and is
    strictly better in one of the two."""
    count, score = points[label]
    return any(c <= count and s >= score and (c < count or s > score)
               for other, (c, s) in points.items() if other != label)


def _reference_front(points: dict) -> list:
    return sorted((label for label in points if not _dominated(label, points)),
                  key=lambda label: (points[label][0], -points[label][1]))


def _running_front(points: dict, keep, order=None, start=None) -> list:
    """A front made by walking the points from cheapest to dearest and keeping those ``keep(score, best)``
    accepts: the shape of the mistakes below."""
    order = order or sorted(points, key=lambda label: (points[label][0], -points[label][1]))
    best, front = start, []
    for label in order:
        if best is None or keep(points[label][1], best):
            front.append(label)
            best = points[label][1]
    return front


_TWINS = ("Two methods here train the same number of parameters and score exactly the same: neither is better in "
          "one of the two, so neither dominates the other, and both are on the front.")


def _front_mistakes(points: dict) -> list[tuple[list, str]]:
    """What the mistakes students make would return for these points, and the message that names each: always
    the same mistakes in the same order (two share a message: keeping the weaker of two equal counts has two
    orders), the exact twins' mistake last."""
    ascending = sorted(points, key=lambda label: (points[label][0], -points[label][1]))
    neighbours = [label for k, label in enumerate(ascending)
                  if k == 0 or points[label][1] > points[ascending[k - 1]][1]]
    reverse = {label: (-count, score) for label, (count, score) in points.items()}
    mistakes = [
        (sorted(_reference_front(reverse), key=lambda label: points[label][0]),
         "You kept the methods that no method with MORE parameters beats. The front asks the opposite question: "
         "does anything with as few or fewer trained parameters score at least as well?"),
        (neighbours, "You compared each method only with the next cheaper one. A method is dominated by ANY cheaper "
                     "method that scores at least as well, not just by its neighbour: compare with the best score "
                     "seen so far."),
    ]
    for order in (sorted(points, key=lambda label: points[label][0]),  # ties left in the order given
                  sorted(points, key=lambda label: (points[label][0], label))):  # ties broken by name
        mistakes.append((_running_front(points, lambda score, best: score > best, order=order),
                         "Two methods here train the same number of parameters, and you kept the weaker of the two "
                         "(it came first in your order). With equal counts the higher score dominates: break ties in "
                         "the parameter count by score, not by name or by the order given."))
    mistakes += [
        (_running_front(points, lambda score, best: score >= best),
         "You kept a method that scores exactly what a cheaper method scores. It buys nothing for its extra "
         "parameters, so it is dominated: a method must beat every cheaper one to be on the front."),
        ([max(points, key=lambda label: points[label][1])],
         "You returned only the best-scoring method. The front holds every method that nothing cheaper (or as "
         "cheap) beats: the cheapest method is on it too."),
    ]
    mistakes += [(_running_front(points, lambda score, best: score > best, start=start),
                  f"You started from a best score of {start:g}, so a method scoring {start:g} or less never gets on "
                  "the front; but scores can be that low (a Matthews correlation runs from −1 to 1). Start below "
                  "every score (−∞), or with the first method.") for start in (0.0, -1.0)]
    mistakes.append((_running_front(points, lambda score, best: score > best), _TWINS))
    return mistakes


def _front_cases():
    """(what, points): random methods on a log-spaced parameter axis with scores that mostly rise with it (the
    largest just below the best), a case with two methods of equal parameter count, and one with an equal
    score at a larger count."""
    generator = np.random.default_rng(10)
    cases = []
    for size in (7, 10, 14):
        counts = sorted({int(c) for c in np.exp(generator.uniform(np.log(500), np.log(2e7), size))})
        scores = [round(0.6 + 0.3 * math.log(c / 500) / math.log(4e4) + generator.normal(0, 0.04), 4) for c in counts]
        scores[-1] = round(max(scores[:-1]) - 0.01, 4)  # the largest method is not the best one
        labels = [f"method {chr(65 + k)}" for k in range(len(counts))]
        order = generator.permutation(len(counts))
        cases.append((f"{len(counts)} random methods", {labels[k]: (counts[k], scores[k]) for k in order}))
    cases.append(("two methods with the same parameter count", {
        "head only": (770, 0.80), "LoRA r=2": (19_202, 0.845), "BitFit": (19_202, 0.861),
        "Houlsby r=8": (89_186, 0.872), "top-1 layer": (1_775_234, 0.866), "full": (22_713_986, 0.901)}))
    cases.append(("a larger method with exactly the same score", {
        "LayerNorm only": (10_754, 0.83), "Houlsby r=2": (26_306, 0.86), "Houlsby r=32": (309_122, 0.88),
        "Houlsby r=256": (2_375_426, 0.88), "full": (22_713_986, 0.89)}))
    cases.append(("CoLA's Matthews correlations, some of them 0 or below", {
        "head only": (770, -0.012), "LayerNorm only": (10_754, 0.0), "BitFit": (19_202, 0.0),
        "Houlsby r=8": (89_186, 0.071), "LoRA r=8": (150_000, -0.004), "Houlsby r=64": (600_000, 0.093),
        "full": (22_713_986, 0.0)}))
    cases.append(("two methods with the same count, the weaker first by name", {
        "head only": (770, 0.80), "Adapter r=1": (19_202, 0.842), "BitFit": (19_202, 0.861),
        "Houlsby r=8": (89_186, 0.872), "full": (22_713_986, 0.901)}))
    cases.append(("methods a hair apart", {
        "head only": (770, 0.8012), "BitFit": (19_202, 0.8013), "Houlsby r=8": (89_186, 0.8721),
        "LoRA r=8": (150_000, 0.8722), "full": (22_713_986, 0.8723)}))
    cases.append(("Matthews correlations down to −1, the lowest a score can be", {
        "inverted head": (770, -1.0), "LayerNorm only": (10_754, -0.4), "Houlsby r=8": (89_186, 0.07),
        "full": (22_713_986, 0.31)}))
    cases.append(("two methods with exactly the same count and score", {
        "head only": (770, 0.80), "BitFit": (19_202, 0.861), "LoRA r=1": (19_202, 0.861),
        "Houlsby r=8": (89_186, 0.872), "top-1 layer": (1_775_234, 0.866), "full": (22_713_986, 0.901)}))
    return cases


_PACKAGE_FRONT = ("Your answer calls the package's tradeoff.pareto_front: that is the function this exercise asks you "
                  "to write. Compare the methods yourself.")


@plain_errors
def check_pareto_front(front_fn) -> None:
    """Check ``front_fn(points) -> list of labels`` (lab 10): ``points`` maps a method's label to
    (trained parameters, dev score); the answer lists the methods no other method dominates, from the fewest
    trained parameters to the most (two methods with exactly the same count and score dominate neither each
    other nor anything else: both are on the front, in either order). The reference compares every pair of
    methods. Scores may be 0 or negative (CoLA's Matthews correlation)."""
    from ...runs.tradeoff import pareto_front  # imported when this check runs: the lab's other checks do without it

    name = getattr(front_fn, "__name__", "pareto_front")
    package = PackageAnswer((pareto_front,), _PACKAGE_FRONT)
    cases = _front_cases()
    for what, points in cases:
        _check_one_front(name, front_fn, what, points, package, cases)

    def fails(points) -> bool:  # the answer alone, unaudited: hypothesis calls it hundreds of times while shrinking
        return not _front_accepted(list(front_fn(dict(points))), _reference_front(points), points)

    failing = smallest_failing(_drawn_fronts(), fails, DRAWN_FRONTS)
    if failing is not None:
        _check_one_front(name, front_fn, f"the drawn set of {len(failing)} method{'s' if len(failing) > 1 else ''} "
                         f"{failing}", failing, package, cases, named=False)
    report_passed(f"Your front matches a pairwise comparison of every method on {len(cases)} sets of methods, "
            "equal parameter counts, equal scores, exact duplicates and scores of 0 or below included, and on "
            f"{DRAWN_FRONTS} drawn sets.")


#: How many sets of methods the check draws beyond its fixed ones (hypothesis, derandomized: the same every run).
#: Counts and scores come from short ranges, so that equal counts, equal scores and exact twins are common.
DRAWN_FRONTS = 150


def _drawn_fronts():
    """Sets of 1 to 12 methods, labelled "m0", "m1", ...: counts from 1 to 20, scores in steps of 0.25 from −1 to
    1. A failing set shrinks to the fewest methods and smallest numbers that still fail."""
    from hypothesis import strategies as st

    method = st.tuples(st.integers(1, 20), st.integers(-4, 4).map(lambda quarter: quarter / 4))
    return st.lists(method, min_size=1, max_size=12).map(
        lambda drawn: {f"m{k}": point for k, point in enumerate(drawn)})


#: A win this narrow is what a tolerance in the comparison swallows.
NARROW_MARGIN = 0.01


def _margin(label, points: dict) -> float:
    """How much ``label`` scores above the best other method with at most as many parameters (−∞ if none)."""
    count, score = points[label]
    rivals = [s for other, (c, s) in points.items() if other != label and c <= count and (c, s) != (count, score)]
    return score - max(rivals) if rivals else math.inf


def _front_of(name: str, front_fn, what: str, points: dict, package: PackageAnswer) -> list:
    got = call_answer(f"{name}(points) for {what}", front_fn, dict(points), package=package)
    if isinstance(got, (str, bytes)) or not hasattr(got, "__iter__"):
        raise CheckFailed(f"{name}(points) returned {got!r}; return a list of the labels on the front.")
    return list(got)


def _wrong_front(mistake: int, points: dict) -> list:
    """What mistake number ``mistake`` of :func:`_front_mistakes` returns for ``points``, where that is not the front."""
    wrong = _front_mistakes(points)[mistake][0]
    return [] if wrong == _reference_front(points) else [wrong]


def _front_accepted(got: list, expected: list, points: dict) -> bool:
    """Whether ``got`` is the front: ``expected``, or it with exact twins (same count and score) in another order."""
    if got == expected:
        return True
    return (sorted(map(str, got)) == sorted(map(str, expected)) and len(set(map(str, got))) == len(got)
            and all(label in points for label in got) and [points[label] for label in got] == [points[label] for label in expected])


def _check_one_front(name: str, front_fn, what: str, points: dict, package: PackageAnswer, cases,
                     named: bool = True) -> None:
    """Check one set of methods, in full (the audit around the call); name a mistake of the catalogue only where
    ``named`` and the answer makes it on every fixed case (a drawn set is checked once the fixed ones passed)."""
    expected = _reference_front(points)
    got = _front_of(name, front_fn, what, points, package)
    if _front_accepted(got, expected, points):
        return
    if len(set(map(str, got))) < len(got):
        raise CheckFailed(f"For {what} your front lists a method more than once ({got}); list each label once.")
    if sorted(map(str, got)) == sorted(map(str, expected)):
        raise CheckFailed(f"For {what} you found the right methods, in the wrong order: list the front from the "
                          f"fewest trained parameters to the most ({expected}).")
    mistakes = _front_mistakes(points) if named else []
    matching = [number for number, (wrong, _) in enumerate(mistakes) if got == wrong != expected]
    if len(set(points.values())) < len(points):  # exact twins: that is what a wrong answer missed first
        matching.sort(key=lambda number: mistakes[number][1] != _TWINS)
    message = next((mistakes[number][1] for number in matching
                    if makes_everywhere(lambda case: _front_of(name, front_fn, *case, package),
                                        lambda case: _wrong_front(number, case[1]), cases)), None)
    missing = [label for label in expected if label not in got]
    margins = {label: _margin(label, points) for label in missing}
    if message is None and missing and all(0 < margin <= NARROW_MARGIN for margin in margins.values()):
        label = missing[0]
        message = (f"{label} beats every method with as few parameters by only {margins[label]:.4g}, and you left it "
                   "out: a tolerance (math.isclose, or `score > best + ε`) treats a narrow win as a tie. The front "
                   "compares exactly; any margin counts.")
    if message is None and any(points[label] == points[other] for label in missing for other in got if other in points):
        message = _TWINS
    extra = [label for label in got if label not in expected]
    raise CheckFailed(f"For {what} your front is {got}; it is {expected}"
                      + (f" (missing {missing})" if missing else "") + (f" (not on it: {extra})" if extra else "")
                      + ". " + (message or "A method is on the front when no other method has at most as many "
                                           "trained parameters and at least its score (and is better in one)."))
