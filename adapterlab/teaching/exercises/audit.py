"""What an answer may not change: the audit every check runs around each call of a student's function.

An answer can return the right value and still break the notebook it runs in: leave autograd switched off or the
default dtype at float64 for every later cell, leave a model in training mode, freeze its parameters, or rewrite
the list or array its caller passed. A check that only reads the returned value cannot see any of it, and a check
that passes fresh copies cannot see the last. So :func:`snapshot` records, before the call, torch's global state
and a deep record of every argument (tensor and array values, a module's parameters, buffers, ``requires_grad``
flags, train/eval mode of every submodule and its hooks; lists, tuples, dicts and sets element by element), and
:func:`first_change` compares after the call and says in words what changed. An argument the exercise is meant to
change (a training step updates the weights; a freeze sets ``requires_grad``) is named with what may change.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

#: What an argument may be allowed to change: its weights (parameter and buffer values, as a training step or a
#: loaded adapter set does), its ``requires_grad`` flags (a freeze), or anything (an optimizer's state).
WEIGHTS, REQUIRES_GRAD, ANYTHING = "weights", "requires_grad", "anything"


def torch_state() -> dict:
    """torch's settings that outlive a call and change every later cell of the notebook."""
    return {"grad": torch.is_grad_enabled(), "dtype": torch.get_default_dtype(),
            "anomaly": torch.is_anomaly_enabled(), "deterministic": torch.are_deterministic_algorithms_enabled()}


_TORCH_MESSAGES = {
    "grad": lambda before: (
        f"left autograd switched {'off' if before else 'on'} for everything that runs after it "
        f"(torch.set_grad_enabled({not before}) without putting it back): every later training cell would "
        f"{'silently compute no gradients' if before else 'record graphs it never needs'}. Use "
        "`with torch.no_grad():`, which restores it when the block ends."),
    "dtype": lambda before: (
        f"left torch's default dtype changed from {str(before).removeprefix('torch.')} "
        "(torch.set_default_dtype without putting it back): every tensor and layer the notebook makes later "
        "would have the new dtype. Convert your own tensors instead (t.double()), or put the default back."),
    "anomaly": lambda before: (
        f"left autograd's anomaly detection switched {'off' if before else 'on'} (torch.autograd.set_detect_anomaly): "
        "every later backward pass of the notebook runs under it. Use it as a `with` block, which restores it."),
    "deterministic": lambda before: (
        f"left torch.use_deterministic_algorithms({not before}) set for the rest of the notebook; put it back."),
}


#: The module method that converts to each dtype, as the message names it.
_CONVERSIONS = {torch.float64: "double", torch.float32: "float", torch.float16: "half", torch.bfloat16: "bfloat16"}


@dataclass
class _Module:
    weights: dict
    requires_grad: dict
    training: dict
    hooks: dict


def hook_count(module: nn.Module) -> int:
    """How many hooks `module` itself holds: an answer that leaves one behind changes every later forward."""
    return sum(len(getattr(module, kind, {})) for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks",
                                                           "_backward_pre_hooks"))


def _record(value, depth: int = 0):
    """A deep record of ``value`` to compare with later, or None for what is not audited (a function, an optimizer,
    an object that cannot be copied)."""
    if isinstance(value, torch.Tensor):
        return ("tensor", value.detach().clone(), value.requires_grad)
    if isinstance(value, np.ndarray):
        return ("array", value.copy())
    if isinstance(value, nn.Module):
        return _Module(weights={name: t.detach().clone() for name, t in [*value.named_parameters(),
                                                                        *value.named_buffers()]},
                       requires_grad={name: p.requires_grad for name, p in value.named_parameters()},
                       training={name: m.training for name, m in value.named_modules()},
                       hooks={name: hook_count(m) for name, m in value.named_modules()})
    if depth > 3:
        return None
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, len(value), [_record(item, depth + 1) for item in value])
    if isinstance(value, dict):
        return ("dict", list(value), {key: _record(item, depth + 1) for key, item in value.items()})
    if isinstance(value, (set, frozenset, str, bytes, int, float, complex, bool, type(None))):
        return ("value", copy.copy(value))
    return None


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.nan_to_num(), b.nan_to_num()) and bool(
        (a.isnan() == b.isnan()).all())


def _module_change(before: _Module, module: nn.Module, name: str, code: str, allowed: set) -> str | None:
    after = _record(module)
    modes = [part for part, mode in before.training.items() if after.training.get(part) != mode]
    if modes:
        was = before.training[modes[0]]
        return (f"left {name} in {'evaluation' if was else 'training'} mode ({code}.{'eval' if was else 'train'}()), "
                f"where dropout is {'off' if was else 'on'}; it came in {'training' if was else 'evaluation'} mode, and "
                "every later cell runs it as you leave it. Note the mode (model.training) and put it back, in a "
                "`finally:` block.")
    if REQUIRES_GRAD not in allowed and ANYTHING not in allowed:
        flags = [part for part, flag in before.requires_grad.items() if after.requires_grad.get(part) != flag]
        if flags:
            now = after.requires_grad.get(flags[0])
            return (f"changed which parameters of {name} require grad ({len(flags)} of them, e.g. {flags[0]} is now "
                    f"{'trainable' if now else 'frozen'}): a later training cell would train another set of "
                    "tensors. Leave requires_grad as it was.")
    hooks = [part or name for part, count in after.hooks.items() if count != before.hooks.get(part, 0)]
    if hooks:
        return (f"left hooks registered on {hooks[0]}{' and other modules' if len(hooks) > 1 else ''}: they run at "
                "every later forward pass. Remove every hook you register (handle.remove()).")
    if WEIGHTS not in allowed and ANYTHING not in allowed:
        if set(before.weights) != set(after.weights):
            return (f"changed which tensors {name} holds ({sorted(set(before.weights) ^ set(after.weights))[0]} added "
                    "or removed): the caller's model is not yours to rebuild; work on what it returns.")
        converted = [part for part, tensor in before.weights.items() if tensor.dtype != after.weights[part].dtype]
        if converted:
            dtype = after.weights[converted[0]].dtype
            method = _CONVERSIONS.get(dtype, "to")
            return (f"converted {name} to {str(dtype).removeprefix('torch.')} in place ({code}.{method}() or "
                    f"{code}.to(...) converts a module's "
                    "own tensors; it does not make a copy): the caller's model now has another dtype. Convert "
                    "copies of the tensors you need (w.double()), or a copy.deepcopy of the module.")
        moved = [part for part, tensor in before.weights.items() if not _same_tensor(tensor, after.weights[part])]
        if moved:
            return (f"changed the weights of {name} in place ({moved[0]}{' and others' if len(moved) > 1 else ''}): "
                    "the caller's model must come back as it went in. Compute on new tensors.")
    return None


def _change(before, value, name: str, allowed: set, code: str = "it") -> str | None:
    """What changed in ``value`` since ``before`` was recorded, in words, or None. ``name`` is how a sentence names
    the argument (`model`), ``code`` how code does (model)."""
    if before is None or ANYTHING in allowed:
        return None
    if isinstance(before, _Module):
        return _module_change(before, value, name, code, allowed)
    kind = before[0]
    in_place = (f"changed {name} in place, the caller's own object: the notebook reads it again afterwards. Work on "
                "a copy (list(x), x.copy(), x.clone()) or build a new one.")
    if kind == "tensor":
        if not isinstance(value, torch.Tensor) or not _same_tensor(before[1], value.detach()):
            return in_place
        if value.requires_grad != before[2]:
            return f"switched requires_grad of {name} {'on' if value.requires_grad else 'off'}; leave it as it came."
        return None
    if kind == "array":
        return None if isinstance(value, np.ndarray) and value.dtype == before[1].dtype and np.array_equal(
            value, before[1], equal_nan=value.dtype.kind in "fc") else in_place
    if kind in ("list", "tuple"):
        if len(value) != before[1]:
            return (f"changed {name} in place (it had {before[1]} items and has {len(value)}: an append, a pop or a "
                    "slice assignment on the caller's list). Build a new list for your own use.")
        return next(filter(None, (_change(item_before, item, f"item {k} of {name}", allowed)
                                  for k, (item_before, item) in enumerate(zip(before[2], value)))), None)
    if kind == "dict":
        if list(value) != before[1]:
            return (f"changed the keys of {name} in place (added, removed or reordered): the caller's dict is not "
                    "yours to edit. Copy it (dict(d)) first.")
        return next(filter(None, (_change(before[2][key], value[key], f"{name}[{key!r}]", allowed)
                                  for key in before[1])), None)
    return None if value == before[1] else in_place


def _names(fn, count: int) -> list[tuple[str, str]]:
    """(as a sentence names it, as code does) for each of the first ``count`` arguments of ``fn``."""
    try:
        parameters = [p.name for p in inspect.signature(fn).parameters.values()
                      if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        parameters = []
    return [(f"`{parameters[k]}`", parameters[k]) if k < len(parameters) else (f"argument {k + 1}", "it")
            for k in range(count)]


@dataclass
class Snapshot:
    torch: dict
    arguments: list


def snapshot(args) -> Snapshot:
    """torch's global state and a deep record of each argument, taken just before an answer is called."""
    return Snapshot(torch_state(), [_record(value) for value in args])


def first_change(before: Snapshot, fn, args, may_change: dict | None = None) -> str | None:
    """The first thing the call changed that it should not have, as the end of a sentence ("left the model in
    training mode ..."), or None. ``may_change`` maps an argument's position to what it may change (:data:`WEIGHTS`,
    :data:`REQUIRES_GRAD`, :data:`ANYTHING`, or a set of them)."""
    now = torch_state()
    for setting, value in before.torch.items():
        if now[setting] != value:
            return _TORCH_MESSAGES[setting](value)
    allowed = {k: {v} if isinstance(v, str) else set(v) for k, v in (may_change or {}).items()}
    for k, (record, value, (name, code)) in enumerate(zip(before.arguments, args, _names(fn, len(args)))):
        change = _change(record, value, name, allowed.get(k, set()), code)
        if change:
            return change
    return None


def restore_torch_state(state: dict) -> None:
    """Put torch's global settings back as ``state`` had them, so that a rejected answer does not leave them changed
    for the rest of the notebook either."""
    torch.set_grad_enabled(state["grad"])
    torch.set_default_dtype(state["dtype"])
    torch.autograd.set_detect_anomaly(state["anomaly"])
    torch.use_deterministic_algorithms(state["deterministic"])
