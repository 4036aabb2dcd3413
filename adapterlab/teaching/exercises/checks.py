"""Self-checks for the lab exercises: each says in plain words what is right or what is wrong.

A check runs the student's code on random cases at the lab's own sizes (BERT-base's d = 768, r = 64
and 12 layers) and at a small one, and compares it with an independent reference (autograd, a real
module, a real model's parameter count). On success it prints one line
starting with ✔. On a wrong answer it raises :class:`CheckFailed` whose message names the mistake,
recognised by comparing the answer with the mistakes students make most often (the residual left
out, a transposed gradient, a forgotten bias …). An answer that still raises ``NotImplementedError``
(the student copies) is reported as missing; whatever else the answer raises, or makes go wrong inside
the check, is reported as one CheckFailed, which Jupyter shows as a single line.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import numbers
import re
import warnings
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...model.adapter import BottleneckAdapter
from ...model.counting import bert_counts, meta_model
from ...model.fold import fold_linear_adapter, linear_adapter_matrix
from ...model.placement import AdapterConfig, add_adapters
from . import audit

#: Largest start deviation ‖A(h) − h‖/‖h‖ accepted as "near the identity".
NEAR_IDENTITY = 0.05
ATOL, RTOL = 1e-5, 1e-4


class CheckFailed(AssertionError):
    """The answer is missing or wrong; the message says which, in plain words."""

    def _render_traceback_(self) -> list[str]:  # IPython shows this one line instead of a traceback
        return [f"✘ {self}"]


def _missing(what: str) -> CheckFailed:
    return CheckFailed(
        f"The answer is missing: {what} still raises the exercise's stub (`raise AnswerMissing(...)` in your "
        "copy, `raise NotImplementedError` where you wrote your own). Write your solution in the exercise cell "
        "above in place of that line, run that cell, then run this check again."
    )


class Forbidden(Exception):
    """Raised by the check itself when the answer uses what the exercise rules out; the message says what."""


#: What the package's own function raises while a check runs an answer (:class:`PackageAnswer`).
_REFUSED = "adapterlab-refused: the package's own answer"


def _refusal(*args, **kwargs):
    # the text written out, not _REFUSED: this code runs as the swapped function's, with its module's globals
    raise RuntimeError("adapterlab-refused: the package's own answer")


@dataclass(frozen=True)
class PackageAnswer:
    """The package's own version of what an exercise asks the student to write, and what to say when an answer
    uses it. The course's one rule: every exercise's answer is the student's own; the package's function is
    there to compare with afterwards. While :func:`call_answer` runs an answer, each of ``functions`` raises
    however the answer reaches it (by its module, by a name imported from it, or as the answer itself): its code
    is swapped for a refusal and put back afterwards."""

    functions: tuple
    message: str

    @contextlib.contextmanager
    def refused(self):
        functions = [inspect.unwrap(function) for function in self.functions]
        codes = [function.__code__ for function in functions]
        for function in functions:
            function.__code__ = _refusal.__code__
        try:
            yield
        finally:
            for function, code in zip(functions, codes):
                function.__code__ = code


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0][:300] if text else ""


#: PyTorch errors whose cause is always the same, with what to do; they say more than any exercise's own hint.
_KNOWN_ERRORS = {
    "a leaf Variable that requires grad is being used in an in-place operation": (
        "You wrote into a tensor that requires grad (a layer's weight or bias, e.g. folded.weight.copy_(...)) with "
        "autograd on: do such copies inside `with torch.no_grad():`."),
    "Can't call numpy() on Tensor that requires grad": (
        "A tensor still holding its autograd graph was turned into NumPy: call .detach() first, or compute it "
        "under torch.no_grad()."),
    "element 0 of tensors does not require grad and does not have a grad_fn": (
        "The loss has no autograd graph: the forward ran under torch.no_grad() or torch.inference_mode(), or a "
        "tensor on the way was detached (.item(), .detach(), .data). Compute it with autograd on."),
}


def call_answer(what: str, fn, *args, hint: str = "", may_change: dict | None = None,
                package: PackageAnswer | None = None):
    """Call the student's code; turn a stub or a crash into a plain-words CheckFailed, and audit the call.

    The advice after the error is the known cause of that PyTorch error when there is one, else ``hint``, the
    exercise's own word on what usually goes wrong there. Every call is audited (:mod:`.audit`): an answer that
    leaves torch's global state, a model's mode or flags, or an argument changed is refused naming what it changed,
    with torch's state put back. ``may_change`` names what an argument is meant to change (by position). An answer
    that is or calls ``package``'s function is refused with its message.
    """
    if package is None:
        return _call_audited(what, fn, args, hint, may_change)
    with package.refused():
        try:
            return _call_audited(what, fn, args, hint, may_change)
        except CheckFailed as error:
            if _REFUSED in str(error):
                raise CheckFailed(package.message) from None
            raise


def makes_everywhere(answer_on, wrong_on, cases) -> bool:
    """Whether an answer makes one mistake on every one of ``cases`` where that mistake shows: ``wrong_on(case)``
    lists what the mistake returns there (nothing where it returns the right value or does not apply), and
    ``answer_on(case)`` what the answer returns. A check names a mistake only when this holds: a value that equals
    a mistake's on one case alone may be a coincidence of that case's numbers."""
    for case in cases:
        wrong = wrong_on(case)
        if wrong and answer_on(case) not in wrong:
            return False
    return True


def smallest_failing(cases, fails, examples: int):
    """The smallest case drawn from ``cases`` (a hypothesis strategy) on which ``fails(case)`` is true, as hypothesis
    shrinks it, or None when none of ``examples`` drawn cases fails. Derandomized and with no example database: the
    same cases every run, and nothing written to disk. ``fails`` calls the answer alone, unaudited (hypothesis
    calls it hundreds of times while shrinking); the check then runs the case it returns in full. An answer that
    raises fails its case (the full check names the error); its warnings, NumPy's float errors and its draws from
    torch's generator are kept from the notebook."""
    from hypothesis import HealthCheck, Phase, find, settings
    from hypothesis.errors import NoSuchExample

    def failing(case) -> bool:
        try:
            with torch.random.fork_rng(), warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                return bool(fails(case))
        except Exception:
            return True

    drawing = settings(max_examples=examples, derandomize=True, database=None, deadline=None,
                       suppress_health_check=list(HealthCheck),
                       phases=(Phase.explicit, Phase.generate, Phase.shrink))  # no "explain": it reruns the answer
    try:
        return find(cases, failing, settings=drawing)
    except NoSuchExample:
        return None


def _drawn_case_failed(what: str, fixed: int, drawn: str, case: str, check_in_full, causes: str) -> None:
    """Run the smallest drawn case the answer gets wrong in full: its diagnosis, said as found on a drawn case (the
    answer passed the ``fixed`` ones), or, where the full check passes, that the answer gave another result when
    called again."""
    try:
        check_in_full()
    except CheckFailed as failed:
        fixed_cases = "the fixed case" if fixed == 1 else f"the {fixed} fixed cases"
        raise CheckFailed(f"Right on {fixed_cases}, {what} is wrong on the smallest of {drawn} where it "
                          f"differs, {case}, which points to {causes}. On that case: {failed}") from None
    raise CheckFailed(f"{what[0].upper()}{what[1:]} gave another result when called again on the same case ({case}): "
                      "it must depend only on what it is given.")


#: The warnings already shown as notes in this session: each once, as Python shows a warning once per place.
_NOTED: set[str] = set()


@contextlib.contextmanager
def _warnings_shown_as_notes():
    """A warning the answer raises (torch's "Converting a tensor with requires_grad=True to a scalar" for a right
    ``float(loss)``) is printed as a note line, once a session, not written to stderr: nbgrader scores a graded cell
    that wrote to stderr as failed, whatever the check said."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for text in dict.fromkeys(f"{w.category.__name__}: {str(w.message).splitlines()[0]}" for w in caught):
                if text not in _NOTED:
                    _NOTED.add(text)
                    print(f"Note: your code warned while the check ran it ({text})")


def _call_audited(what: str, fn, args, hint: str, may_change: dict | None):
    before = audit.snapshot(args)
    try:
        with _warnings_shown_as_notes():
            result = fn(*args)
    except NotImplementedError:
        audit.restore_torch_state(before.torch)
        raise _missing(what) from None
    except (CheckFailed, Forbidden) as error:
        audit.restore_torch_state(before.torch)
        raise CheckFailed(str(error)) from None
    except Exception as error:
        audit.restore_torch_state(before.torch)
        text = str(error)
        advice = next((fix for cause, fix in _KNOWN_ERRORS.items() if cause in text), hint)
        raise CheckFailed(f"Calling {what} raised {type(error).__name__}: {_first_line(error)}. {advice}".rstrip()) from error
    change = audit.first_change(before, fn, args, may_change)
    if change:
        audit.restore_torch_state(before.torch)
        raise CheckFailed(f"Calling {what} {change}")
    return result


def plain_errors(check):
    """Whatever the student's code makes go wrong inside a check, the check answers with one CheckFailed."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the check's models are small: one thread is fastest, and fair to a busy machine
        try:
            return check(*args, **kwargs)
        except CheckFailed:
            raise
        except NotImplementedError:
            raise _missing("your answer") from None
        except Exception as error:
            raise CheckFailed(
                f"Your answer made the check fail with {type(error).__name__}: {_first_line(error)}. It returned "
                "something the exercise does not ask for, or left an object in a state the check cannot use; "
                "compare what you return with the exercise's description."
            ) from error
        finally:
            torch.set_num_threads(threads)

    return checked


def close_enough(a, b) -> bool:
    """Equal within ATOL/RTOL, whatever the two dtypes (a float64 answer is compared, not crashed on)."""
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or a.shape != b.shape:
        return False
    if a.is_complex() or b.is_complex() or a.device.type == "meta" or b.device.type == "meta":
        return False
    return torch.allclose(a.detach().double(), b.detach().double(), atol=ATOL, rtol=RTOL)


def _name(obj) -> str:
    return getattr(obj, "__name__", type(obj).__name__)


def report_passed(message: str) -> None:
    print(f"✔ {message}")


# --------------------------------------------------------------------------------------------------
# Lab 1: the adapter module
# --------------------------------------------------------------------------------------------------

_NONLINEARITIES = {
    "GELU": F.gelu,
    "GELU (tanh approximation)": lambda x: F.gelu(x, approximate="tanh"),
    "ReLU": F.relu,
    "SiLU": F.silu,
    "tanh": torch.tanh,
}


def _check_linear(adapter, attribute: str, in_features: int, out_features: int, role: str) -> None:
    layer = getattr(adapter, attribute, None)
    if layer is None:
        raise CheckFailed(
            f"Your adapter has no attribute `{attribute}`: name the {role} `self.{attribute} = nn.Linear(...)` "
            "so that the labs can find it."
        )
    if not isinstance(layer, nn.Linear):
        raise CheckFailed(f"`self.{attribute}` is a {type(layer).__name__}; it should be an nn.Linear.")
    if (layer.in_features, layer.out_features) != (in_features, out_features):
        raise CheckFailed(
            f"`self.{attribute}` maps {layer.in_features} → {layer.out_features} features; the {role} must map "
            f"{in_features} → {out_features}."
        )


def _check_parameter_shapes(adapter: nn.Module, d: int, r: int) -> None:
    """Exactly W_down (r, d), b_down (r,), W_up (d, r) and b_up (d,); otherwise say which part is off."""
    expected = 2 * r * d + r + d
    shapes = {name: tuple(p.shape) for name, p in adapter.named_parameters()}
    count = sum(p.numel() for p in adapter.parameters())
    biases = {name: shape for name, shape in shapes.items() if len(shape) < 2}
    if sorted(shapes.values()) == sorted([(r, d), (r,), (d, r), (d,)]):
        return
    if count == 2 * r * d and not biases:
        raise CheckFailed(
            f"Your adapter has {count} parameters, 2rd without biases; the paper's adapter has biases in both "
            f"projections: 2rd + r + d = {expected}. Use nn.Linear's default bias=True."
        )
    wrong = {name: shape for name, shape in biases.items() if shape not in ((r,), (d,))}
    if wrong:
        listed = ", ".join(f"{name} {shape}" for name, shape in wrong.items())
        raise CheckFailed(
            f"Your bias shapes are wrong: {listed}. Every unit needs its own bias: b_down has shape ({r},), one "
            f"per bottleneck unit, and b_up ({d},), one per output feature (nn.Linear makes them for you)."
        )
    have = sorted(biases.values())
    if have == [(d,)]:
        raise CheckFailed(f"Your adapter has b_up but no b_down: the down-projection needs its bias of shape ({r},) too.")
    if have == [(r,)]:
        raise CheckFailed(f"Your adapter has b_down but no b_up: the up-projection needs its bias of shape ({d},) too.")
    listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
    raise CheckFailed(
        f"Your adapter has {count} parameters ({listed}); a bottleneck adapter has exactly W_down ({r}, {d}), "
        f"b_down ({r},), W_up ({d}, {r}) and b_up ({d},): 2rd + r + d = {expected}."
    )


def _diagnose_forward(out: torch.Tensor, h: torch.Tensor, adapter: nn.Module) -> str | None:
    """None when out = h + up(f(down(h))) for a known f; otherwise what the code computes instead."""
    down, up = adapter.down, adapter.up
    z = down(h)
    for name, f in _NONLINEARITIES.items():
        if close_enough(out, h + up(f(z))):
            return None
    if any(close_enough(out, up(f(z))) for f in _NONLINEARITIES.values()):
        return "Your adapter returns up(f(down(h))) without adding h back: the residual is missing."
    if close_enough(out, h + up(z)):
        return (
            "Your adapter has no nonlinearity: it computes h + up(down(h)), which is linear in h (lab 3 shows it "
            "is then just a LoRA update). Put f between the down- and the up-projection."
        )
    if any(close_enough(out, h + f(up(z))) for f in _NONLINEARITIES.values()):
        return "You applied the nonlinearity after the up-projection; it belongs between the two projections."
    if any(close_enough(out, h + up(down(f(h)))) for f in _NONLINEARITIES.values()):
        return "You applied the nonlinearity before the down-projection; it belongs between the two projections."
    if any(close_enough(out, f(h + up(f(z)))) or close_enough(out, f(h + up(z))) for f in _NONLINEARITIES.values()):
        return "You applied the nonlinearity to the sum; the residual must carry h through untouched."
    if close_enough(out, h):
        return "Your adapter returns h unchanged: it must add its correction, computed from h, to h."
    return (
        "Your adapter's output is not h + up(f(down(h))) for f = GELU, ReLU, SiLU or tanh "
        f"(largest difference {(out - h - up(F.gelu(z))).abs().max().item():.2g} from the GELU version). Likely "
        "causes: a nonlinearity other than these, a scale or an extra term in the sum, or a projection used twice or "
        "in the other order."
    )


#: The sizes lab 1 builds (BERT-base's d = 768 with the paper's r = 64), then a small non-square pair, so that an
#: answer that works only for one size shows.
ADAPTER_SIZES = [(768, 64), (24, 8)]
LEARNING_STEPS = 3
#: A unit whose gradient stays below this share of b_up's is dead: AdamW (ε = 1e-8) would barely move it.
ALIVE = 1e-6


def _parts(adapter: nn.Module) -> dict[str, torch.Tensor]:
    return {"W_down": adapter.down.weight, "b_down": adapter.down.bias, "W_up": adapter.up.weight, "b_up": adapter.up.bias}


def _them(names: list[str]) -> tuple[str, str, str]:
    return (" and ".join(names), "is" if len(names) == 1 else "are", "it" if len(names) == 1 else "them")


def _forward(name: str, adapter: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """The student's forward on a copy of h: it must leave h alone and return a tensor shaped like it."""
    given = h.clone()
    out = call_answer(f"{name}.forward", adapter, given, may_change={0: audit.ANYTHING})  # named below: h += …
    if not torch.equal(given, h):
        raise CheckFailed(
            "Your forward changes its input in place (`h += …`, `h.add_(…)` or `h[...] = …`): the caller's h is "
            "overwritten, and inside BERT that is the residual stream itself. Build a new tensor: return h + …."
        )
    if not isinstance(out, torch.Tensor) or out.shape != h.shape:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise CheckFailed(
            f"For an input of shape {tuple(h.shape)} your forward returns {shape}; an adapter must return "
            "a tensor of the same shape as its input, for (tokens, d) as for (batch, sequence, d)."
        )
    if out.dtype != h.dtype:
        raise CheckFailed(f"For a {h.dtype} input your forward returns {out.dtype}; keep the input's dtype.")
    return out


def _cannot_learn(adapter: nn.Module, h: torch.Tensor) -> str | None:
    """Why a freshly built adapter cannot learn, or None when it can.

    The test is training itself, in the adapter's own dtype (float32, as the labs train), on a random loss
    L = Σ⟨A(h), δ⟩ over a few plain gradient steps: every one of W_down, b_down, W_up and b_up must get a
    gradient in one of the steps, and every bottleneck unit must get one that is not negligible (above
    ``ALIVE`` times b_up's, which is Σ δ and so never small): a unit pushed deep into f's flat tail gets a slope
    that float32 rounds to nothing even where float64 would still see one. Zero-up init (W_up = 0, W_down
    random) is alive: W_up moves at step 1, W_down at step 2.
    """
    frozen = [part for part, p in _parts(adapter).items() if not p.requires_grad]
    if frozen:
        names, verb, it = _them(frozen)
        return (f"Your adapter cannot learn: {names} {verb} frozen (requires_grad=False), so no optimizer can ever "
                f"change {it}. Leave every parameter of the adapter trainable: which parts train is decided later, "
                "per task (lab 5).")
    probe = copy.deepcopy(adapter)
    parts = _parts(probe)
    h = h.to(adapter.up.weight.dtype)
    delta = torch.randn(h.shape, generator=torch.Generator().manual_seed(1)).to(h.dtype)
    reached = {part: False for part in parts}
    units = {part: torch.zeros(p.shape[0] if part != "W_up" else p.shape[1], dtype=torch.bool)
             for part, p in parts.items() if part != "b_up"}
    for _ in range(LEARNING_STEPS):
        with torch.enable_grad():
            out = probe(h.clone())
            if not isinstance(out, torch.Tensor) or not out.requires_grad:
                return ("Your adapter cannot learn: its output carries no gradient at all (the forward runs under "
                        "torch.no_grad(), or detaches its result), so no weight can ever move. Compute it with "
                        "ordinary tensor operations and let autograd see them.")
            gradients = torch.autograd.grad((out * delta).sum(), list(parts.values()), allow_unused=True)
        with torch.no_grad():
            floor = ALIVE * gradients[-1].abs().max() if gradients[-1] is not None else 0.0
            for (part, p), g in zip(parts.items(), gradients):
                if g is None:
                    continue
                reached[part] = True
                if part == "W_up":
                    units[part] |= g.abs().gt(floor).any(dim=0)
                elif part in units:
                    units[part] |= g.abs().gt(floor).any(dim=1) if g.ndim == 2 else g.abs().gt(floor)
                p.sub_(1e-2 * g)
    cut = [part for part, ok in reached.items() if not ok]
    if cut:
        names, verb, it = _them(cut)
        return (f"Your adapter cannot learn: no gradient ever reaches {names}. Your forward cuts {it} off from the "
                f"output (a .detach(), .data or torch.no_grad() inside it), so {it} can never move. Let the whole "
                "computation run through autograd.")
    stuck = [part for part, seen in units.items() if not seen.all()]
    if not stuck:
        return None
    if set(stuck) == {"W_down", "b_down", "W_up"} and not any(seen.any() for seen in units.values()):
        if not torch.count_nonzero(adapter.up.weight) and not torch.count_nonzero(adapter.down.weight):
            why = ("both matrices start at zero. W_up's gradient needs f(W_down h + b_down) ≠ 0 and W_down's needs "
                   "W_up ≠ 0, so neither can ever start")
            fix = "Keep one of them random: the identity at the start needs only one of them to be zero."
        elif not torch.count_nonzero(adapter.down.weight):
            why = ("W_down starts at zero, so every bottleneck unit sits at z = b_down, where your f gives 0 and "
                   "passes no gradient")
            fix = "Start W_down random."
        else:
            bias = adapter.down.bias.detach()
            why = ("every bottleneck unit starts dead: for every token z = W_down h + b_down lies where your f is flat "
                   f"and passes no gradient a float32 step can use (b_down is {bias.min().item():.3g} … "
                   f"{bias.max().item():.3g}; with ReLU that is z < 0, with GELU or SiLU z far below 0)")
            fix = "Start b_down at zero, so that z sits where f has a slope."
        return (f"Your adapter cannot learn: {why}. In {LEARNING_STEPS} training steps only b_up gets a gradient, "
                f"and b_up alone can only add a constant. {fix}")
    part = stuck[0]
    dead = int((~units[part]).sum())
    return (f"Your adapter cannot learn fully: {dead} of the {units[part].numel()} bottleneck units never get a "
            f"gradient in {part} during {LEARNING_STEPS} training steps (dead units: z = W_down h + b_down sits where "
            "f is flat for every token, or their weights start at exactly zero). Start W_down random and b_down at zero.")


def _identical_units(adapter: nn.Module) -> str | None:
    """Which bottleneck units start as exact copies of another, in words, or None.

    Two units with the same W_down row, b_down entry and W_up column get the same gradients and stay copies for
    ever, whether all r are copies of one or only some pairs are.
    """
    units = torch.cat([adapter.down.weight, adapter.down.bias[:, None], adapter.up.weight.T], dim=1).detach()
    distinct = torch.unique(units, dim=0).shape[0]
    r = units.shape[0]
    if distinct == r:
        return None
    if distinct == 1:
        return (f"All {r} bottleneck units of your fresh adapter start with identical weights, so they get "
                "identical gradients and stay identical: the bottleneck acts as if r were 1. Draw random weights.")
    first = next((i, j) for i in range(r) for j in range(i + 1, r) if torch.equal(units[i], units[j]))
    return (f"Only {distinct} of the {r} bottleneck units of your fresh adapter are different (units {first[0]} and "
            f"{first[1]}, for example, start with the same W_down row, b_down and W_up column): copies get identical "
            f"gradients and stay copies, so the bottleneck acts as if r were {distinct}. Draw every weight at random "
            "(no repeat, tile or expand of a smaller block).")


def _why_not_identity(adapter: nn.Module, h: torch.Tensor, deviation: float, d: int, r: int) -> str:
    """What makes a fresh adapter move h too far: its b_up, nn.Linear's default init, or too large a σ."""
    share = f"A freshly built {type(adapter).__name__}({d}, {r}) changes h by {100 * deviation:.0f} % " \
            f"(‖A(h) − h‖/‖h‖ = {deviation:.2f}); it should start near the identity (below {100 * NEAR_IDENTITY:.0f} %)"
    probe = copy.deepcopy(adapter)
    with torch.no_grad():
        probe.up.bias.zero_()
        without_bias = (torch.linalg.norm(probe(h.clone()) - h) / torch.linalg.norm(h)).item()
    if torch.count_nonzero(adapter.up.bias) and without_bias < NEAR_IDENTITY:
        return (f"{share}. Your b_up does it: it starts non-zero (largest |b_up| = "
                f"{adapter.up.bias.abs().max().item():.2g}) and adds the same vector to every token. Start b_up at zero.")
    stds = [float(adapter.down.weight.detach().std()), float(adapter.up.weight.detach().std())]
    defaults = [1 / (3 * d) ** 0.5, 1 / (3 * r) ** 0.5]  # nn.Linear's uniform(±1/√fan_in)
    if all(abs(s - t) < 0.25 * t for s, t in zip(stds, defaults)):
        return (f"{share}. nn.Linear's default weights are far too large: make the correction tiny at the start "
                "(lab 2 measures how tiny).")
    return (f"{share}. Your initial weights are too large for BERT's size (standard deviation {stds[0]:.2g} in W_down, "
            f"{stds[1]:.2g} in W_up): the deviation grows like σ²·√(r·d), so a σ that looks small at d = 16 moves h a "
            "lot at d = 768, r = 64. Make the correction tiny at the start (lab 2 measures how tiny).")


@plain_errors
def check_adapter_class(adapter_class, d_model: int = 768, bottleneck: int = 64) -> None:
    """Check a student's adapter class ``adapter_class(d_model, bottleneck)`` with ``.down`` and ``.up`` (lab 1).

    Checked at BERT-base's size (d = 768, r = 64, the lab's) and at a small non-square size, on inputs of
    shape (tokens, d) and (batch, sequence, d): it must have exactly W_down, b_down, W_up and b_up, compute
    h + up(f(down(h))) at random (non-special) weights without touching h, start near the identity
    (‖A(h) − h‖/‖h‖ < 5 %) and be able to learn: in a few training steps a gradient must reach every
    parameter and every bottleneck unit.
    """
    name = _name(adapter_class)
    if isinstance(adapter_class, type) and issubclass(adapter_class, BottleneckAdapter):
        raise CheckFailed(f"{name} is the package's BottleneckAdapter, or builds on it: the exercise asks you to write "
                          "the module yourself, from nn.Module, with self.down and self.up.")
    sizes = [(d_model, bottleneck)] + [size for size in ADAPTER_SIZES if size != (d_model, bottleneck)]
    with torch.random.fork_rng():
        torch.manual_seed(0)
        for d, r in sizes:
            adapter = _built(name, adapter_class, d, r)
            inputs = [torch.randn(2, 5, d), torch.randn(10, d)]  # (batch, sequence, d) and (tokens, d)
            fresh = [_forward(name, adapter, h) for h in inputs]
            _check_random_forward(name, adapter, inputs)
            problem = _cannot_learn(adapter, torch.randn(64, d))
            if problem:
                raise CheckFailed(problem)
            copies = _identical_units(adapter)
            if copies:
                raise CheckFailed(copies)
            for h, out in zip(inputs, fresh):
                deviation = (torch.linalg.norm(out - h) / torch.linalg.norm(h)).item()
                if not deviation < NEAR_IDENTITY:
                    raise CheckFailed(_why_not_identity(adapter, h, deviation, d, r))
    failing = smallest_failing(_drawn_adapter_shapes(), lambda case: not _forward_right_on(adapter_class, *case),
                               DRAWN_SHAPES)
    if failing is not None:
        d, r, leading, seed = failing
        _drawn_case_failed(f"{name}", 2 * len(sizes), f"{DRAWN_SHAPES} drawn sizes and input shapes",
                           f"d = {d}, r = {r}, input shape {(*leading, d)}",
                           lambda: _check_drawn_shape(name, adapter_class, d, r, leading, seed),
                           "a size written in, or a step that only works for some input shapes (a reshape or a squeeze "
                           "that needs more than one row, or three axes)")
    report_passed(
        f"{name} is right: h + up(f(down(h))) at random weights, 2rd + r + d = {2 * bottleneck * d_model + bottleneck + d_model:,} "
        f"parameters for d = {d_model}, r = {bottleneck} (and {DRAWN_SHAPES} drawn sizes and input shapes); it starts "
        f"near the identity (below {100 * NEAR_IDENTITY:.0f} %) and every weight can learn."
    )


#: How many (d, r, input shape) the adapter check draws beyond its fixed sizes (hypothesis, derandomized): d up to
#: 24, r up to 8, inputs of one or two leading axes of 1 to 4 (a batch of one, a one-token sentence), so that a size
#: written in or a reshape or squeeze that assumes the fixed inputs' shapes shows.
DRAWN_SHAPES = 30


def _drawn_adapter_shapes():
    """(d, r, leading axes, seed) drawn by hypothesis; a failing case shrinks to the smallest."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 24), st.integers(1, 8), st.lists(st.integers(1, 4), min_size=1, max_size=2),
                     st.integers(0, 99))


def _randomized(adapter: nn.Module) -> nn.Module:
    """A copy with random weights, so that a missing f or residual shows (at init W_up may be 0)."""
    probe = copy.deepcopy(adapter)
    with torch.no_grad():
        for parameter in probe.parameters():
            fan_in = parameter.shape[1] if parameter.ndim == 2 else 4
            parameter.normal_(0.0, fan_in ** -0.5)
    return probe


def _check_random_forward(name: str, adapter: nn.Module, inputs) -> None:
    probe = _randomized(adapter)
    d, r = adapter.down.in_features, adapter.down.out_features
    with torch.no_grad():
        for h in inputs:
            problem = _diagnose_forward(_forward(name, probe, h), h, probe)
            if problem:
                raise CheckFailed(problem + (f" (d = {d}, r = {r}, input shape {tuple(h.shape)})"))


def _forward_right_on(adapter_class, d: int, r: int, leading, seed: int) -> bool:
    """Whether the class, built at (d, r) and called alone (unaudited) at random weights on an input of the drawn
    shape, computes h + up(f(down(h))) without touching h."""
    with torch.no_grad():
        torch.manual_seed(seed)
        adapter = adapter_class(d, r)
        h = torch.randn(*leading, d)
        probe, given = _randomized(adapter), h.clone()
        out = probe(given)
        return (torch.equal(given, h) and isinstance(out, torch.Tensor) and out.shape == h.shape
                and out.dtype == h.dtype and _diagnose_forward(out, h, probe) is None)


def _built(name: str, adapter_class, d: int, r: int) -> nn.Module:
    """The student's adapter of size (d, r), built through the audit, with exactly its four parameters."""
    adapter = call_answer(f"{name}({d}, {r})", adapter_class, d, r)
    if not isinstance(adapter, nn.Module):
        raise CheckFailed(f"{name}({d}, {r}) gave a {type(adapter).__name__}; an adapter is an nn.Module.")
    _check_linear(adapter, "down", d, r, "down-projection (d_model → bottleneck)")
    _check_linear(adapter, "up", r, d, "up-projection (bottleneck → d_model)")
    _check_parameter_shapes(adapter, d, r)
    return adapter


def _check_drawn_shape(name: str, adapter_class, d: int, r: int, leading, seed: int) -> None:
    """The drawn case in full, with the fixed cases' messages."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        adapter = _built(name, adapter_class, d, r)
        _check_random_forward(name, adapter, [torch.randn(*leading, d)])


# --------------------------------------------------------------------------------------------------
# Lab 2: the adapter's weight gradients, in general and at step zero
# --------------------------------------------------------------------------------------------------

#: (d, r, tokens, f) of the general gradient cases. The first is square (d = r), so that a forgotten or
#: untransposed W_up still has the right shape and can be named rather than crash.
#: The last is the lab's own size, BERT-base's d = 768 with r = 64.
GRADIENT_CASES = [(6, 6, 5, "gelu"), (16, 4, 7, "tanh"), (12, 3, 6, "relu"), (10, 5, 4, "silu"), (768, 64, 12, "gelu")]


def _general_case(d: int, r: int, tokens: int, activation: str, seed: int):
    """An adapter with every weight and bias random (W_up ≠ 0), and random h, δ.

    For ReLU, z = W_down h + b_down is kept at least 0.05 away from the kink at 0, where a closed form and
    autograd could legitimately disagree about f′.
    """
    for attempt in range(100):
        generator = torch.Generator().manual_seed(1000 * seed + attempt)
        with torch.random.fork_rng():  # leave the notebook's random state as it was
            adapter = BottleneckAdapter(d, r, activation, init="bert")
        with torch.no_grad():
            for parameter in adapter.parameters():  # at large sizes weights of 1/√fan_in keep z where f bends
                scale = parameter.shape[-1] ** -0.5 if d > 64 and parameter.ndim == 2 else 0.5
                parameter.copy_(scale * torch.randn(parameter.shape, generator=generator))
            h = torch.randn(tokens, d, generator=generator)
            delta = torch.randn(tokens, d, generator=generator)
            if activation != "relu" or adapter.down(h).abs().min() > 0.05:
                return adapter, h, delta
    raise RuntimeError("no ReLU case away from the kink")  # pragma: no cover - 100 draws always find one


def _activation_derivative(adapter, z: torch.Tensor) -> torch.Tensor:
    """f′(z) element by element, by autograd: f acts on each number alone, so ∂Σf(z)/∂z = f′(z)."""
    z = z.detach().requires_grad_()
    with torch.enable_grad():
        return torch.autograd.grad(adapter.act(z).sum(), z)[0]


def _weight_gradients(adapter, h, delta):
    """(∂L/∂W_down, ∂L/∂W_up) by autograd for L = Σ_t ⟨Adapter(h_t), δ_t⟩ (the reference)."""
    with torch.enable_grad():
        loss = (adapter(h) * delta).sum()
        return torch.autograd.grad(loss, (adapter.down.weight, adapter.up.weight))


_AUTOGRAD_USED = (
    "Your gradient function let autograd do the chain rule ({how}); the exercise asks for the weight gradients "
    "without autograd. Autograd may compute only the slope of f, f_prime(adapter.act, z), f′ at every entry of z; "
    "write the rest out with matrix products: through the up-projection (W_upᵀ), through f (times f′(z)), and "
    "into the weights (a sum over the tokens)."
)


_VMAP_REFUSED = (
    "Your gradient function takes a gradient inside torch.func.vmap (vmap(grad(f)), say). That may be autograd of f "
    "alone, but inside vmap the check cannot see what is differentiated, so it refuses vmap rather than guess. For "
    "f′ at every entry of z use f_prime(adapter.act, z), which is allowed; write the rest with matrix products."
)


def _inside_vmap(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` is, or wraps, one of torch.func.vmap's batched stand-ins, which carry no values the check
    can read (torch.func.grad wraps what it differentiates once more)."""
    functorch = getattr(torch._C, "_functorch", None)
    if functorch is None or not hasattr(functorch, "is_batchedtensor"):
        return False
    for _ in range(8):  # a few levels of transforms at most
        if functorch.is_batchedtensor(tensor):
            return True
        if not functorch.is_functorch_wrapped_tensor(tensor):
            return False
        tensor = functorch.get_unwrapped(tensor)
    return False


class _SlopeOnlyEngine:
    """Stands in for autograd's engine: it runs a backward pass only when what comes out is f′ at one point.

    Every way into autograd (torch.autograd.grad by any name, .backward(), torch.func.grad, autograd on copies of the
    weights) ends in the engine's run_backward, so the rule is checked on what the pass computes, not on how the
    answer reached it.
    """

    def __init__(self, engine, adapter: nn.Module):
        self.engine, self.adapter, self.busy = engine, adapter, False

    def __getattr__(self, name):
        return getattr(self.engine, name)

    def run_backward(self, outputs, grad_outputs, keep_graph, create_graph, inputs=(), allow_unreachable=False,
                     accumulate_grad=True):
        args = (outputs, grad_outputs, keep_graph, create_graph, inputs, allow_unreachable, accumulate_grad)
        if self.busy:
            return self.engine.run_backward(*args)
        if accumulate_grad or len(inputs) != 1 or not isinstance(inputs[0], torch.Tensor):
            how = ".backward()" if accumulate_grad else f"a gradient with respect to {len(inputs)} tensors at once"
            raise Forbidden(_AUTOGRAD_USED.format(how=how))
        if _inside_vmap(inputs[0]):
            raise Forbidden(_VMAP_REFUSED)
        result = self.engine.run_backward(*args)
        self.busy = True
        try:
            slope = _activation_derivative(self.adapter, inputs[0].detach())
        except Exception:
            slope = None
        finally:
            self.busy = False
        if slope is None or not close_enough(result[0], slope):
            raise Forbidden(_AUTOGRAD_USED.format(
                how="a gradient that is not f′(z) entry by entry: it runs through more than f, such as the weights, "
                    "the up-projection or a weighted sum"))
        return result


@contextlib.contextmanager
def _without_autograd_on(adapter: nn.Module):
    """Inside, autograd computes nothing but slopes of the adapter's f (see :class:`_SlopeOnlyEngine`); forward-mode
    transforms, which never reach the engine, are refused by name."""
    from torch.autograd.variable import Variable
    import torch.func as func

    def refuse(how):
        def refused(*args, **kwargs):
            raise Forbidden(_AUTOGRAD_USED.format(how=how))
        return refused

    patches = [(Variable, "_execution_engine", _SlopeOnlyEngine(Variable._execution_engine, adapter))]
    patches += [(func, name, refuse(f"torch.func.{name}")) for name in ("jvp", "jacfwd", "linearize", "hessian")
                if hasattr(func, name)]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    try:
        for owner, name, replacement in patches:
            setattr(owner, name, replacement)
        yield
    finally:
        for owner, name, original in saved:
            setattr(owner, name, original)


def _gradient_answer(name: str, gradients_fn, adapter, h, delta, hint: str = ""):
    """Call the student's gradient function on copies, with autograd refused on the weights; return
    (grad_down, grad_up) detached."""
    twin = copy.deepcopy(adapter).requires_grad_(False)  # an adapter's weights as any inference code has them
    with _without_autograd_on(twin):
        answer = call_answer(f"{name}(adapter, h, delta)", gradients_fn, twin, h.clone(), delta.clone(), hint=hint)
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise CheckFailed(f"{name} must return two tensors, (grad_down, grad_up); it returned {type(answer).__name__}.")
    return tuple(g.detach() if isinstance(g, torch.Tensor) else g for g in answer)


def _diagnose_down_gradient(grad_down, adapter, h, delta, reference: torch.Tensor) -> str:
    d, r, tokens = adapter.d_model, adapter.bottleneck, h.shape[0]
    if isinstance(grad_down, torch.Tensor) and grad_down.shape == (tokens, r, d):
        return (
            f"Your ∂L/∂W_down has shape {tuple(grad_down.shape)}: one gradient per token. L sums over the tokens, "
            "so its gradient is the sum of theirs: sum over the batch."
        )
    if isinstance(grad_down, torch.Tensor) and grad_down.shape == (d, r) and d != r and close_enough(grad_down.T, reference):
        return f"Your ∂L/∂W_down has shape ({d}, {r}) but W_down has shape ({r}, {d}): it is transposed."
    if not isinstance(grad_down, torch.Tensor) or grad_down.shape != (r, d):
        shape = tuple(grad_down.shape) if isinstance(grad_down, torch.Tensor) else type(grad_down).__name__
        return f"Your ∂L/∂W_down is {shape}; it must be a tensor shaped like W_down: ({r}, {d})."
    w_up, w_down = adapter.up.weight.detach(), adapter.down.weight.detach()
    z = h @ w_down.T + adapter.down.bias.detach()
    back = delta @ w_up  # row t: W_upᵀ δ_t
    slope = _activation_derivative(adapter, z)
    mistakes = [
        (back.T @ h, "You left out f′(z): the gradient passes back through the nonlinearity, so each unit's "
         "signal is scaled by the slope of f at its own z."),
        ((back * adapter.act(z)).T @ h, "You used f(z) where the slope f′(z) belongs: the chain rule needs the "
         "derivative of the nonlinearity, not its value."),
        ((back * _activation_derivative(adapter, h @ w_down.T)).T @ h, "You left out b_down: f′ is taken at "
         "z = W_down h + b_down, bias included."),
        (reference / tokens, "You averaged over the tokens; L sums over them, so the gradient is a sum (no division)."),
    ]
    if d == r:
        mistakes += [
            ((delta * slope).T @ h, "You left out W_upᵀ: δ lives at the adapter's output (width d); it reaches the "
             "bottleneck only through the up-projection, i.e. through W_upᵀ."),
            (((delta @ w_up.T) * slope).T @ h, "You used W_up where W_upᵀ belongs: going backwards through the "
             "up-projection multiplies by its transpose."),
            (reference.T, "Your ∂L/∂W_down is transposed: entry (i, j) belongs to bottleneck unit i and input "
             "feature j, like W_down itself."),
        ]
    for value, message in mistakes:
        if close_enough(grad_down, value):
            return message
    if not torch.count_nonzero(grad_down):
        return ("Your ∂L/∂W_down is zero: that is the step-zero answer, right only while W_up = 0. Here W_up ≠ 0, so δ "
                "reaches the bottleneck through W_upᵀ and W_down gets a gradient: write the general chain rule.")
    for other, f in _NONLINEARITIES.items():
        z_other = z.detach().requires_grad_()
        with torch.enable_grad():
            other_slope = torch.autograd.grad(f(z_other).sum(), z_other)[0]
        if not close_enough(other_slope, slope) and close_enough(grad_down, (back * other_slope).T @ h):
            return (f"You used the slope of {other}, but this adapter's f is {adapter.activation_name}: take f′ of the "
                    "adapter's own nonlinearity, f_prime(adapter.act, z), not a formula for one f.")
    for t in range(tokens):
        if close_enough(grad_down, ((back[t] * slope[t])[:, None] * h[t][None, :])):
            return "You used a single token; L sums over all tokens, so ∂L/∂W_down sums their contributions."
    return (
        "Your ∂L/∂W_down does not match autograd (largest difference "
        f"{(grad_down - reference).abs().max().item():.2g}). Follow δ backwards step by step: through the "
        "up-projection, through f, then through the down-projection. Likely causes: a size or a loop range written "
        "in (right at one size only), f′ taken at another point, or W_up used in another shape."
    )


def _diagnose_up_gradient(grad_up, adapter, h, delta, reference: torch.Tensor) -> str:
    d, r = adapter.d_model, adapter.bottleneck
    z = h @ adapter.down.weight.detach().T + adapter.down.bias.detach()
    if isinstance(grad_up, torch.Tensor) and grad_up.shape == (r, d) and d != r and close_enough(grad_up.T, reference):
        return f"Your ∂L/∂W_up has shape ({r}, {d}) but W_up has shape ({d}, {r}): it is transposed."
    if not isinstance(grad_up, torch.Tensor) or grad_up.shape != (d, r):
        shape = tuple(grad_up.shape) if isinstance(grad_up, torch.Tensor) else type(grad_up).__name__
        return f"Your ∂L/∂W_up is {shape}; it must be a tensor shaped like W_up: ({d}, {r})."
    mistakes = [
        (delta.T @ z, "You left out the nonlinearity: the up-projection sees f(z), not z."),
        (delta.T @ adapter.act(h @ adapter.down.weight.detach().T), "You left out b_down: the nonlinearity is "
         "applied to W_down h + b_down, bias included."),
        (reference / h.shape[0], "You averaged over the tokens; L sums over them, so the gradient is a sum (no division)."),
        (delta.T @ _activation_derivative(adapter, z), "You used f′(z) where f(z) belongs: the up-projection "
         "multiplies the value of f, so its weight's gradient sees that value."),
    ]
    if d == r:
        mistakes.append((reference.T, "Your ∂L/∂W_up is transposed: entry (i, j) belongs to output feature i and "
                         "bottleneck unit j, like W_up itself."))
    for value, message in mistakes:
        if close_enough(grad_up, value):
            return message
    return (
        "Your ∂L/∂W_up does not match autograd (largest difference "
        f"{(grad_up - reference).abs().max().item():.2g}). It is δᵀ f(z): the residual passes δ unchanged to "
        "the up-projection, whose input is f(z) = f(W_down h + b_down), summed over the tokens. Likely causes: "
        "something other than δ on the left (A(h) − h, or δ through W_up), or f at another point."
    )


def _refuse_swapped(grad_down, grad_up, reference_down, reference_up) -> None:
    """Both gradients right, but handed back as (grad_up, grad_down)."""
    if close_enough(grad_down, reference_up) and close_enough(grad_up, reference_down):
        raise CheckFailed("Your two gradients are right but returned in swapped order: return (grad_down, grad_up), "
                          "∂L/∂W_down (shaped like W_down) first, then ∂L/∂W_up.")


_GRADIENT_SHAPES = (
    "Mind the shapes: h and delta are (tokens, d), the bottleneck is (tokens, r); δ reaches the bottleneck "
    "through the up-projection."
)


#: How many adapters the gradient check draws beyond its fixed cases (hypothesis, derandomized: the same every
#: run): d up to 24, r up to 8, 1 to 6 tokens, every nonlinearity of the fixed cases, so that a size, a loop range or
#: a shape written for the fixed cases' adapters is caught (d = r among them, where a transpose hides).
DRAWN_ADAPTERS = 30


def _drawn_adapters():
    """(d, r, tokens, activation, seed) drawn by hypothesis; a failing case shrinks to the smallest adapter."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 24), st.integers(1, 8), st.integers(1, 6),
                     st.sampled_from(tuple(dict.fromkeys(case[3] for case in GRADIENT_CASES))), st.integers(0, 99))


def _gradients_right(gradients_fn, adapter, h, delta) -> bool:
    """Whether the answer, called alone (unaudited, autograd refused on the weights), matches autograd on a case."""
    references = _weight_gradients(adapter, h, delta)
    twin = copy.deepcopy(adapter).requires_grad_(False)
    with _without_autograd_on(twin):
        answer = gradients_fn(twin, h.clone(), delta.clone())
    return all(isinstance(got, torch.Tensor) and got.shape == reference.shape and close_enough(got.detach(), reference)
               for got, reference in zip(answer, references, strict=True))


def _check_drawn_gradients(name: str, gradients_fn) -> None:
    """The smallest drawn adapter the answer gets wrong, checked in full and reported with what was measured: the
    answer passed the fixed cases, so no catalogue mistake is named."""
    failing = smallest_failing(_drawn_adapters(), lambda case: not _gradients_right(gradients_fn, *_general_case(*case)),
                               DRAWN_ADAPTERS)
    if failing is None:
        return
    d, r, tokens, activation, _ = failing
    adapter, h, delta = _general_case(*failing)
    grad_down, grad_up = _gradient_answer(name, gradients_fn, adapter, h, delta, hint=_GRADIENT_SHAPES)
    for label, got, reference in zip(("∂L/∂W_down", "∂L/∂W_up"), (grad_down, grad_up), _weight_gradients(adapter, h, delta)):
        if isinstance(got, torch.Tensor) and got.shape == reference.shape and close_enough(got, reference):
            continue
        measured = (f"largest difference {(got - reference).abs().max().item():.2g}"
                    if isinstance(got, torch.Tensor) and got.shape == reference.shape else
                    f"it is {tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__}, "
                    f"not {tuple(reference.shape)}")
        raise CheckFailed(
            f"{label} — right on the {len(GRADIENT_CASES)} fixed cases, your gradient does not match autograd on the "
            f"smallest of {DRAWN_ADAPTERS} drawn adapters where it differs: f = {activation}, d = {d}, r = {r}, "
            f"{tokens} token{'s' if tokens > 1 else ''} ({measured}). Likely causes: a size or a loop range written "
            "in, or a step that only works when d, r or the number of tokens is large enough.")


@plain_errors
def check_adapter_gradients(gradients_fn) -> None:
    """Check ``gradients_fn(adapter, h, delta) -> (grad_down, grad_up)`` against autograd (lab 2).

    General adapters: every weight and bias random (W_up ≠ 0), f = GELU, tanh, ReLU (away from its
    kink) and SiLU, h and δ of shape (tokens, d), L = Σ_t ⟨Adapter(h_t), δ_t⟩.
    """
    name = _name(gradients_fn)
    for seed, (d, r, tokens, activation) in enumerate(GRADIENT_CASES):
        adapter, h, delta = _general_case(d, r, tokens, activation, seed)
        reference_down, reference_up = _weight_gradients(adapter, h, delta)
        grad_down, grad_up = _gradient_answer(name, gradients_fn, adapter, h, delta, hint=_GRADIENT_SHAPES)
        where = f" (f = {activation}, d = {d}, r = {r}, {tokens} tokens)"
        _refuse_swapped(grad_down, grad_up, reference_down, reference_up)
        if not close_enough(grad_down, reference_down):
            raise CheckFailed("∂L/∂W_down — " + _diagnose_down_gradient(grad_down, adapter, h, delta, reference_down) + where)
        if not close_enough(grad_up, reference_up):
            raise CheckFailed("∂L/∂W_up — " + _diagnose_up_gradient(grad_up, adapter, h, delta, reference_up) + where)
    _check_drawn_gradients(name, gradients_fn)
    activations = ", ".join(dict.fromkeys(case[3] for case in GRADIENT_CASES))
    report_passed(
        f"Your gradients match autograd for random adapters (W_up ≠ 0) with f = {activations} "
        f"(within {ATOL:g}, {len(GRADIENT_CASES)} cases up to d = 768, r = 64, and {DRAWN_ADAPTERS} drawn ones), "
        "computed without autograd."
    )


#: (d, r, tokens) of the zero-up cases: small ones, a single token, and the lab's own BERT-base size.
ZERO_UP_CASES = [(16, 4, 5), (12, 3, 7), (20, 6, 1), (768, 64, 12)]


def _zero_up_case(d: int, r: int, tokens: int, seed: int):
    """A zero-up adapter (with non-zero b_down and b_up, so a forgotten or misplaced bias shows) and random h, δ."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        adapter = BottleneckAdapter(d, r, "gelu", init="zero_up")
        with torch.no_grad():
            adapter.down.bias.normal_(0.0, 1.0, generator=generator)
            adapter.up.bias.normal_(0.0, 1.0, generator=generator)
    return adapter, torch.randn(tokens, d, generator=generator), torch.randn(tokens, d, generator=generator)


def _zero_up_cases():
    return [_zero_up_case(d, r, tokens, seed) for seed, (d, r, tokens) in enumerate(ZERO_UP_CASES)]


def _check_one_zero_up(name: str, gradients_fn, adapter, h, delta) -> None:
    reference_down, reference_up = _weight_gradients(adapter, h, delta)
    grad_down, grad_up = _gradient_answer(name, gradients_fn, adapter, h, delta)
    _refuse_swapped(grad_down, grad_up, reference_down, reference_up)
    shape = (adapter.bottleneck, adapter.d_model)
    if not isinstance(grad_down, torch.Tensor) or grad_down.shape != shape:
        got = tuple(grad_down.shape) if isinstance(grad_down, torch.Tensor) else type(grad_down).__name__
        raise CheckFailed(f"Your ∂L/∂W_down is {got}; it must be a tensor shaped like W_down: {shape}.")
    if torch.count_nonzero(grad_down) or torch.count_nonzero(reference_down):
        raise CheckFailed(
            "Your ∂L/∂W_down is not zero at W_up = 0. Every path from W_down to the loss goes through W_up, "
            "so at step zero of a zero-up adapter it is exactly zero."
        )
    if not close_enough(grad_up, reference_up):
        raise CheckFailed(_diagnose_up_gradient(grad_up, adapter, h, delta, reference_up))


def _drawn_zero_up():
    """(d, r, tokens, seed) drawn by hypothesis, as the general check draws them (:data:`DRAWN_ADAPTERS`)."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 24), st.integers(1, 8), st.integers(1, 6), st.integers(0, 99))


@plain_errors
def check_zero_up_gradients(gradients_fn) -> None:
    """Check ``gradients_fn(adapter, h, delta) -> (grad_down, grad_up)`` on zero-up adapters (lab 2).

    The step-zero special case: with W_up = 0, ∂L/∂W_down must be exactly 0 (every path from W_down
    to the loss passes through W_up), while ∂L/∂W_up matches autograd. On the fixed cases, then on
    :data:`DRAWN_ADAPTERS` drawn ones.
    """
    name = _name(gradients_fn)
    for adapter, h, delta in _zero_up_cases():
        _check_one_zero_up(name, gradients_fn, adapter, h, delta)
    failing = smallest_failing(_drawn_zero_up(), lambda case: not _gradients_right(gradients_fn, *_zero_up_case(*case)),
                               DRAWN_ADAPTERS)
    if failing is not None:
        d, r, tokens, _ = failing
        _drawn_case_failed("your gradient", len(ZERO_UP_CASES), f"{DRAWN_ADAPTERS} drawn zero-up adapters",
                           f"d = {d}, r = {r}, {tokens} token{'s' if tokens > 1 else ''}",
                           lambda: _check_one_zero_up(name, gradients_fn, *_zero_up_case(*failing)),
                           "a size or a loop range written in, or a step that only works when d, r or the number of "
                           "tokens is large enough")
    report_passed(
        "At W_up = 0 your gradients match autograd: ∂L/∂W_down = 0 exactly and ∂L/∂W_up ≠ 0 "
        f"(within {ATOL:g}) on {len(ZERO_UP_CASES)} random zero-up adapters, BERT-base's d = 768, r = 64 among them, "
        f"and on {DRAWN_ADAPTERS} drawn ones."
    )


# --------------------------------------------------------------------------------------------------
# Lab 3: folding a linear adapter into the dense layer before it
# --------------------------------------------------------------------------------------------------


_FOLD_ORDER = (
    "The adapter acts after dense, so its matrix multiplies W from the left, and the folded weight is "
    "(d_out × d_in) like W."
)


def _linear_case(d_in: int, d_out: int, bottleneck: int, seed: int, init_scale: float = 0.3):
    """A dense layer d_in → d_out, a linear adapter of width d_out with random (non-zero) biases, and inputs;
    drawn without touching the notebook's random state."""
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        dense = nn.Linear(d_in, d_out)
        adapter = BottleneckAdapter(d_out, bottleneck, "identity", init="houlsby", init_scale=init_scale)
        with torch.no_grad():
            adapter.down.bias.normal_(0.0, 1.0, generator=generator)
            adapter.up.bias.normal_(0.0, 1.0, generator=generator)
    return dense.eval(), adapter.eval(), torch.randn(5, d_in, generator=generator)


def _fold_case(seed: int = 0):
    return _linear_case(12, 16, 4, seed)


def _fold_cases():
    """A small non-square case first, then BERT-base's own layers (r = 64): the attention output projection
    768 → 768 and the FFN's output projection 3072 → 768, with weights small enough that the sum stays O(1)."""
    return [_fold_case(), _linear_case(768, 768, 64, 1, init_scale=0.05), _linear_case(3072, 768, 64, 2, init_scale=0.05)]


def _check_folded_layer(folded, layer: nn.Linear, what: str) -> None:
    """One nn.Linear of the layer's shape, dtype and bias; otherwise name what differs."""
    if not isinstance(folded, nn.Linear):
        raise CheckFailed(
            f"Your fold returns a {type(folded).__name__}; it must return one nn.Linear: that the folded model "
            "has exactly the original architecture is the point."
        )
    if (folded.in_features, folded.out_features) != (layer.in_features, layer.out_features):
        raise CheckFailed(
            f"Your folded layer maps {folded.in_features} → {folded.out_features}; it must have {what}'s shape "
            f"{layer.in_features} → {layer.out_features}."
        )
    if folded.bias is None and layer.bias is not None:
        raise CheckFailed(f"Your folded layer has no bias (bias=False), but {what} has one and the adapter adds its "
                          "own: the fold needs a bias.")
    wrong = {t.dtype for t in (folded.weight, folded.bias) if t is not None} - {layer.weight.dtype}
    if wrong:
        raise CheckFailed(
            f"Your folded layer holds {', '.join(map(str, sorted(wrong, key=str)))} tensors, but {what} is "
            f"{layer.weight.dtype}: the folded layer must drop into the same model. Build it in the layer's dtype "
            f"(nn.Linear(..., dtype={str(layer.weight.dtype).replace('torch.', 'torch.')}) or .to(dtype)), and do "
            "the products in that dtype or higher."
        )


def _left_alone(module: nn.Module, before: dict, what: str) -> None:
    """The fold must not write into what it reads."""
    if any(not torch.equal(before[k], v) for k, v in module.state_dict().items()):
        raise CheckFailed(
            f"Your fold changed {what} in place (an in-place op such as mul_, add_, copy_ or `+=` on its weights): "
            f"{what} must stay as it was, since the folded layer replaces the pair and is compared with it. Compute "
            "the folded weight and bias as new tensors and copy them into a new nn.Linear."
        )


_PACKAGE_FOLD = PackageAnswer((fold_linear_adapter, linear_adapter_matrix), (
    "Your answer calls the package's fold (fold_linear_adapter or linear_adapter_matrix): that is what this exercise "
    "asks you to write. Work out W' and b' from the adapter's four tensors yourself."))


def _check_one_fold(name: str, fold_fn, dense, adapter, x) -> None:
    before = {part: copy.deepcopy(module.state_dict()) for part, module in (("dense", dense), ("adapter", adapter))}
    with torch.random.fork_rng():  # a new nn.Linear draws from the notebook's generator
        folded = call_answer(f"{name}(dense, adapter)", fold_fn, dense, adapter, hint=_FOLD_ORDER, package=_PACKAGE_FOLD,
                             may_change={0: audit.WEIGHTS, 1: audit.WEIGHTS})  # named below, with the in-place op
    _left_alone(dense, before["dense"], "the original dense layer")
    _left_alone(adapter, before["adapter"], "the adapter")
    _check_folded_layer(folded, dense, "dense")
    size = f" (dense {dense.in_features} → {dense.out_features}, r = {adapter.bottleneck})"
    with torch.no_grad():
        reference = adapter(dense(x))
        got = folded(x)
        if close_enough(got, reference):
            return
        w_up, w_down = adapter.up.weight.double(), adapter.down.weight.double()
        matrix = torch.eye(adapter.d_model, dtype=torch.float64) + w_up @ w_down
        weight = (matrix @ dense.weight.double()).float()
        if close_enough(got, adapter.delta(dense(x))) or close_enough(
                folded.weight, (w_up @ w_down @ dense.weight.double()).float()):
            problem = (
                "You dropped the identity, i.e. the adapter's residual: the adapter returns its input plus a "
                "correction, so W itself must stay in the folded weight beside the correction's part."
            )
        elif close_enough(folded.weight, weight):
            problem = "The weight is right but the bias is not: " + _serial_bias_mistake(folded.bias, dense, adapter)
        else:
            problem = (
                "Your folded layer's output differs from dense followed by the adapter (largest difference "
                f"{(got - reference).abs().max().item():.2g}), and neither its weight nor its output matches a "
                f"mistake we know. {_FOLD_ORDER} Likely causes: W multiplied from the right, a transposed "
                "W_up W_down, or a bias term used twice."
            )
    raise CheckFailed(problem + size)


def _serial_bias_mistake(bias, dense, adapter) -> str:
    """What a folded bias left out, in words: the check names the missing piece, not the formula the exercise
    asks for. Everything that does not multiply x is the bias: dense's bias, which passes through the whole
    adapter, and the adapter's own two biases."""
    w_up, b_down, b_up = adapter.up.weight.double(), adapter.down.bias.double(), adapter.up.bias.double()
    matrix = torch.eye(adapter.d_model, dtype=torch.float64) + w_up @ adapter.down.weight.double()
    through = matrix @ dense.bias.double() if dense.bias is not None else torch.zeros_like(b_up)
    alone = dense.bias.double() if dense.bias is not None else torch.zeros_like(b_up)
    mistakes = [
        (through, "it leaves out the adapter's own biases, which reach the output even where x = 0."),
        (alone + w_up @ b_down + b_up, "dense's bias is part of the adapter's input, like W·x, so it passes "
         "through the adapter too."),
        (through + w_up @ b_down, "it leaves out b_up, the bias the up-projection adds last."),
        (through + b_up, "it leaves out b_down's contribution: b_down passes through the "
         "up-projection before it reaches the output."),
    ]
    got = bias.double() if bias is not None else torch.zeros_like(b_up)
    for wrong, message in mistakes:
        if close_enough(got, wrong):
            return message
    return ("collect every term that does not multiply x: dense's bias, which passes through the whole adapter, "
            "and the adapter's own two biases.")


#: How many layer-and-adapter pairs each fold check draws beyond its fixed cases (hypothesis, derandomized: the same
#: every run): sizes 1 to 24, r 1 to 8 (wider than d too), the parallel fold's scale from -4 to 4, so that a size
#: written in, a square-only step (W_up W_down W needs d_in = d_out to hide a wrong order) or a scale used as 1 shows.
DRAWN_FOLDS = 40


def _drawn_folds():
    """(d_in, d_out, r, seed) drawn by hypothesis; a failing case shrinks to the smallest layer."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 24), st.integers(1, 24), st.integers(1, 8), st.integers(0, 99))


def _drawn_parallel_folds():
    """(d, r, scale, seed) drawn by hypothesis, the scale in quarter steps."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, 24), st.integers(1, 8), st.integers(-16, 16).map(lambda quarters: quarters / 4),
                     st.integers(0, 99))


def _folds_right(fold, layer: nn.Linear, adapter, x, reference) -> bool:
    """Whether ``fold()`` (the answer called alone, unaudited) returns one nn.Linear of the layer's shape computing
    ``reference`` on ``x`` and leaves the layer and the adapter as they were."""
    before = [copy.deepcopy(module.state_dict()) for module in (layer, adapter)]
    with torch.no_grad():
        folded = fold()
        return (isinstance(folded, nn.Linear) and folded.weight.shape == layer.weight.shape
                and close_enough(folded(x), reference)
                and all(_same_state(module.state_dict(), state) for module, state in zip((layer, adapter), before)))


def _same_state(now: dict, before: dict) -> bool:
    return now.keys() == before.keys() and all(torch.equal(now[key], before[key]) for key in now)


def _check_drawn_folds(name: str, fold_fn) -> None:
    def fails(case) -> bool:
        dense, adapter, x = _linear_case(*case)
        with torch.no_grad():
            reference = adapter(dense(x))
        return not _folds_right(lambda: fold_fn(dense, adapter), dense, adapter, x, reference)

    failing = smallest_failing(_drawn_folds(), fails, DRAWN_FOLDS)
    if failing is not None:
        d_in, d_out, r, _ = failing
        _drawn_case_failed("your fold", len(_fold_cases()), f"{DRAWN_FOLDS} drawn layers", f"dense {d_in} → {d_out}, r = {r}",
                           lambda: _check_one_fold(name, fold_fn, *_linear_case(*failing)),
                           "a size written in, or a step that only works for a square layer or for large enough d and r")


@plain_errors
def check_fold(fold_fn) -> None:
    """Check ``fold_fn(dense, adapter) -> nn.Linear`` for a linear adapter that follows ``dense`` (lab 3).

    The result must be one nn.Linear of dense's shape and dtype computing adapter(dense(x)), with dense left
    unchanged: W' = (I + W_up W_down) W and b' = (I + W_up W_down) b + W_up b_down + b_up. Checked on a small
    non-square layer and on BERT-base's attention (768 → 768) and FFN (3072 → 768) output projections, r = 64.
    """
    name = _name(fold_fn)
    for dense, adapter, x in _fold_cases():
        _check_one_fold(name, fold_fn, dense, adapter, x)
    _check_drawn_folds(name, fold_fn)
    report_passed(
        "Your fold is exact: one nn.Linear reproduces dense followed by the linear adapter (within "
        f"{ATOL:g}), for 12 → 16, for BERT-base's 768 → 768 and 3072 → 768 projections with r = 64, and for "
        f"{DRAWN_FOLDS} drawn sizes."
    )


def _parallel_case(seed: int = 0, d: int = 12, r: int = 3, scale: float = 2.5, init_scale: float = 0.3):
    """A d → d projection, a linear adapter beside it with random biases, a scale that is not 1, inputs."""
    projection, adapter, inputs = _linear_case(d, d, r, seed, init_scale=init_scale)
    return projection, adapter, scale, inputs


def _parallel_cases():
    """A small case, then BERT-base's size (d = 768, r = 64) with another scale."""
    return [_parallel_case(), _parallel_case(1, 768, 64, 4.0, init_scale=0.05)]


@plain_errors
def check_parallel_fold(fold_fn) -> None:
    """Check ``fold_fn(projection, adapter, scale) -> nn.Linear`` for a linear adapter beside ``projection`` (lab 3).

    The parallel adapter reads the projection's input x and adds scale · adapter.delta(x) to its output;
    the answer must be one nn.Linear of the projection's shape and dtype that computes the sum, leaving the
    projection unchanged. Compared with the unfolded pair on random inputs, at a small size and at d = 768, r = 64.
    """
    name = _name(fold_fn)
    for projection, adapter, scale, x in _parallel_cases():
        _check_one_parallel_fold(name, fold_fn, projection, adapter, scale, x)
    _check_drawn_parallel_folds(name, fold_fn)
    report_passed(
        f"Your parallel fold is exact: one nn.Linear reproduces the projection plus s × the linear adapter beside "
        f"it (within {ATOL:g}), for 12 → 12 with s = 2.5, for BERT-base's 768 → 768 with r = 64, s = 4, and for "
        f"{DRAWN_FOLDS} drawn sizes and scales."
    )


def _check_drawn_parallel_folds(name: str, fold_fn) -> None:
    def fails(case) -> bool:
        d, r, scale, seed = case
        projection, adapter, x = _linear_case(d, d, r, seed)
        with torch.no_grad():
            reference = projection(x) + scale * adapter.delta(x)
        return not _folds_right(lambda: fold_fn(projection, adapter, scale), projection, adapter, x, reference)

    failing = smallest_failing(_drawn_parallel_folds(), fails, DRAWN_FOLDS)
    if failing is not None:
        d, r, scale, seed = failing
        projection, adapter, x = _linear_case(d, d, r, seed)
        _drawn_case_failed("your parallel fold", len(_parallel_cases()), f"{DRAWN_FOLDS} drawn layers",
                           f"projection {d} → {d}, r = {r}, s = {scale:g}",
                           lambda: _check_one_parallel_fold(name, fold_fn, projection, adapter, scale, x),
                           "a size written in, a step that only works for large enough d and r, or the scale taken "
                           "apart in a way that needs it positive (a square root) or whole")


def _check_one_parallel_fold(name: str, fold_fn, projection, adapter, scale, x) -> None:
    before = {part: copy.deepcopy(module.state_dict()) for part, module in (("projection", projection),
                                                                             ("adapter", adapter))}
    with torch.random.fork_rng():  # a new nn.Linear draws from the notebook's generator
        folded = call_answer(f"{name}(projection, adapter, scale)", fold_fn, projection, adapter, scale,
                             may_change={0: audit.WEIGHTS, 1: audit.WEIGHTS})  # named below
    _left_alone(projection, before["projection"], "the projection")
    _left_alone(adapter, before["adapter"], "the adapter")
    _check_folded_layer(folded, projection, "the projection")
    d = projection.in_features
    with torch.no_grad():
        reference = projection(x) + scale * adapter.delta(x)
        got = folded(x)
        if close_enough(got, reference):
            return
        w, b = projection.weight, projection.bias
        update, offset = adapter.up.weight @ adapter.down.weight, adapter.up.weight @ adapter.down.bias + adapter.up.bias
        eye = torch.eye(d)
        right_weight = w + scale * update
        weight_mistakes = [
            (w + update, "You forgot the scale s: the adapter's whole output is multiplied by s, matrix and bias alike."),
            ((eye + update) @ w, "You folded it as a serial adapter after the projection; a parallel adapter "
             "reads the projection's input x, not its output, and its output is scaled by s."),
            (w + eye + scale * update, "You added an identity: a parallel adapter has no residual of its own (the "
             "residual around the sublayer is outside this fold), so nothing but the projection carries x through."),
            (w + scale * update.T, "Your low-rank product is transposed: x goes through W_down first, then W_up."),
            ((eye + scale * update) @ w, "You folded it as a serial adapter after the projection; a parallel adapter "
             "reads the projection's input x, not its output."),
        ]
        for weight, message in weight_mistakes:
            if close_enough(folded.weight, weight):
                raise CheckFailed(message)
        if close_enough(folded.weight, right_weight):
            bias_mistakes = [
                (b, "The weight is right but you forgot the adapter's bias terms: its biases add a constant to every output."),
                (b + scale * adapter.up.bias, "The weight is right but the bias misses W_up·b_down: b_down passes "
                 "through the up-projection before it reaches the output."),
                (b + offset, "The weight is right but the bias term is not scaled: s multiplies all of the adapter's output."),
            ]
            for bias, message in bias_mistakes:
                if close_enough(folded.bias, bias):
                    raise CheckFailed(message)
            raise CheckFailed("The weight is right but the bias is not: the projection keeps its own bias as it is, "
                              "and the adapter's biases are scaled with the rest of its output. Likely causes: the "
                              "projection's bias left out or scaled, or b_up counted twice.")
        raise CheckFailed(
            "Your folded layer's output differs from the projection plus the scaled adapter (largest difference "
            f"{(got - reference).abs().max().item():.2g}), and its weight matches no mistake we know. Likely causes: "
            "the scale on part of the product only, W_down W_up in the other order, or the projection's weight "
            "left out."
        )


# --------------------------------------------------------------------------------------------------
# Lab 4: counting what a task trains
# --------------------------------------------------------------------------------------------------

#: (d, n_layers, r, placement, train_layernorm, num_labels): BERT-large Pfeiffer (the paper's model, another
#: placement), BERT-base Houlsby, BERT-base parallel with frozen LayerNorms and with trained ones, and a tiny
#: model. Every placement meets both LayerNorm choices, so an answer wrong for one pair only cannot pass.
TRAINED_COUNT_CASES = [
    (1024, 24, 64, "pfeiffer", True, 3),
    (768, 12, 64, "houlsby", True, 2),
    (768, 12, 48, "parallel", False, 2),
    (32, 3, 4, "houlsby", False, 5),
    (384, 6, 48, "pfeiffer", False, 2),  # the offline stand-in's shape (MiniLM: 6 layers, d = 384)
    (768, 12, 64, "houlsby", True, 1),  # one output: a regression head
    (384, 6, 16, "parallel", True, 3),
]


@functools.lru_cache(maxsize=None)
def _counted_model(d: int, n_layers: int, r: int, placement: str, train_layernorm: bool, num_labels: int) -> int:
    """The reference: parameters with requires_grad in a real BertForSequenceClassification (meta device)."""
    from transformers import BertConfig  # imported here: the other checks do without it

    config = BertConfig(
        hidden_size=d, num_hidden_layers=n_layers, num_attention_heads=d // 64 if d % 64 == 0 else 1,
        intermediate_size=4 * d,
    )
    model = meta_model(config, placement, r, train_layernorm=train_layernorm, num_labels=num_labels)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


#: Why the pooler is not counted; the same words in the lab 4 and lab 5 checks.
POOLER_STAYS_FROZEN = ("the pooler stays frozen: adapter-bert trains adapters, LayerNorms and the classifier only "
                       "(the pooler is part of the pretrained backbone)")


def _count_mistakes(d, n_layers, r, placement, train_layernorm, num_labels) -> list[tuple[str, int, str]]:
    """Plausible wrong counts: (which mistake, the count it gives here, what went wrong). A mistake that depends on
    the placement is one mistake per placement."""
    k = AdapterConfig.preset(placement).adapters_per_layer
    per_adapter = 2 * r * d + r + d
    adapters = n_layers * k * per_adapter
    norms = (2 * n_layers + 1) * 2 * d if train_layernorm else 0
    pooler, classifier = d * d + d, d * num_labels + num_labels
    rest = norms + classifier
    mistakes = [
        (f"adapters per layer, {placement}", n_layers * (3 - k) * per_adapter + rest, f"{placement} puts {k} "
         f"adapter{'s' if k == 2 else ''} in every layer; you counted the other number."),
        ("adapter biases", n_layers * k * 2 * r * d + rest, "You left out the adapters' biases: each adapter has r + d "
         "of them."),
        ("pooler", adapters + rest + pooler, f"You counted the pooler, but {POOLER_STAYS_FROZEN}."),
        ("pooler weight", adapters + rest + d * d, f"You counted the pooler's weight, but {POOLER_STAYS_FROZEN}."),
        ("pooler for classifier", adapters + norms + pooler, f"You counted the pooler instead of the classifier: "
         f"{POOLER_STAYS_FROZEN}, and the classifier is new, so every task trains it."),
        ("no classifier", adapters + norms, "You left out the classifier, the layer that maps to the labels: it is "
         "new, so every task trains it."),
        ("classifier bias", adapters + norms + d * num_labels, "You forgot the classifier's bias (one per label)."),
    ]
    if train_layernorm:
        mistakes += [
            ("no LayerNorms", adapters + classifier, "You left out the LayerNorms: with train_layernorm=True they "
             "are trained too."),
            ("one LayerNorm short", adapters + norms - 2 * d + classifier, "You missed one LayerNorm: BERT has one "
             "after the embeddings as well as two in every layer."),
            ("LayerNorm of d", adapters + norms // 2 + classifier, "A LayerNorm has a gain and a bias: 2d "
             "parameters, not d."),
        ]
    else:
        mistakes.append(("frozen LayerNorms", adapters + (2 * n_layers + 1) * 2 * d + classifier,
                         "You counted the LayerNorms, but with train_layernorm=False they stay frozen."))
    if num_labels != 2:
        mistakes.append(("two labels", adapters + norms + 2 * d + 2, f"You counted a classifier for 2 labels; it "
                         f"has num_labels outputs (here {num_labels}): d·num_labels + num_labels."))
    if d != 768:
        base_norms = (2 * n_layers + 1) * 2 * 768 if train_layernorm else 0
        mistakes += [("768 in the adapters", n_layers * k * (2 * r * 768 + r + 768) + norms + classifier,
                      f"You wrote BERT-base's d = 768 into the adapters' count; use the d you are given (here {d})."),
                     ("768 in the LayerNorms", adapters + base_norms + classifier, "You wrote BERT-base's d = 768 "
                      f"into the LayerNorms' count; use the d you are given (here {d}).")]
    if n_layers != 12:
        norms_12 = (2 * 12 + 1) * 2 * d if train_layernorm else 0
        mistakes += [("12 layers", 12 * k * per_adapter + norms + classifier, "You counted BERT-base's 12 layers; "
                      f"use n_layers (here {n_layers})."),
                     ("12 layers", 12 * k * per_adapter + norms_12 + classifier, "You counted BERT-base's 12 layers; "
                      f"use n_layers (here {n_layers}).")]
    return mistakes


def _wrong_counts(mistake: str, case) -> list[int]:
    """What ``mistake`` counts for one case where that is not the right count."""
    return [value for name, value, _ in _count_mistakes(*case) if name == mistake and value != _counted_model(*case)]


def _count_or_none(count_fn, case):
    try:
        return count_fn(*case)
    except Exception:  # no mistake of the catalogue crashes
        return None


def _count_parts(d, n_layers, r, placement, train_layernorm, num_labels) -> str:
    """What a task trains, part by part, in words: which parts, not their counts (those are the answer)."""
    k = AdapterConfig.preset(placement).adapters_per_layer
    norms = "every LayerNorm of the backbone" if train_layernorm else "no LayerNorm (they stay frozen)"
    return f"{k} adapter{'s' if k > 1 else ''} in each of its {n_layers} layers, {norms} and the classifier"


_PACKAGE_COUNT = PackageAnswer((bert_counts,), (
    "Your answer calls the package's bert_counts: that is the count this exercise asks you to make. Count each "
    "trained part yourself, from the model's printout (print(model))."))


#: How many models lab 4's check draws beyond its fixed cases (hypothesis, derandomized: the same ones every run),
#: and their sizes: any d, layer count, r and label count up to these, every placement and LayerNorm choice, so
#: that a size or a branch written for the fixed cases' models is caught.
DRAWN_COUNT_EXAMPLES = 40
DRAWN_D, DRAWN_LAYERS, DRAWN_R, DRAWN_LABELS = 96, 8, 48, 6


def _closed_form(d, n_layers, r, placement, train_layernorm, num_labels) -> int:
    """What a task trains, by the closed form: the reference while hypothesis draws and shrinks (hundreds of
    calls; a real model costs about 0.1 s to build). A test shows it equal to :func:`_counted_model` on drawn
    models, and the case a check reports is counted on a real model."""
    k = AdapterConfig.preset(placement).adapters_per_layer
    norms = (2 * n_layers + 1) * 2 * d if train_layernorm else 0
    return n_layers * k * (2 * r * d + r + d) + norms + d * num_labels + num_labels


def _drawn_count_cases():
    """(d, n_layers, r, placement, train_layernorm, num_labels) drawn by hypothesis; a failing case shrinks to the
    smallest model that still fails."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, DRAWN_D), st.integers(1, DRAWN_LAYERS), st.integers(1, DRAWN_R),
                     st.sampled_from(("houlsby", "pfeiffer", "parallel")), st.booleans(), st.integers(1, DRAWN_LABELS))


def _counts_right(count_fn, case) -> bool:
    got = _count_or_none(count_fn, case)
    return isinstance(got, numbers.Integral) and not isinstance(got, bool) and got == _closed_form(*case)


def _check_count(name: str, count_fn, case, named: bool = True) -> None:
    """Check one case, in full (the audit around the call); name a mistake of the catalogue only where ``named``
    and the answer makes it on every fixed case."""
    d, n_layers, r, placement, train_layernorm, num_labels = case
    call = f"{name}(d={d}, n_layers={n_layers}, r={r}, placement={placement!r}, train_layernorm={train_layernorm}, num_labels={num_labels})"
    got = call_answer(call, count_fn, *case, package=_PACKAGE_COUNT)
    expected = _counted_model(*case)
    if isinstance(got, bool) or not isinstance(got, numbers.Number):
        raise CheckFailed(f"{call} returned {got!r}; it must return a number of parameters (an int).")
    if got == expected and not isinstance(got, numbers.Integral):
        raise CheckFailed(f"{call} returned {got!r}, a float; a count is a whole number: use integer arithmetic.")
    if got == expected:
        return
    for mistake, value, message in _count_mistakes(*case) if named else ():
        if got == value and makes_everywhere(lambda case: _count_or_none(count_fn, case),
                                             lambda case: _wrong_counts(mistake, case), TRAINED_COUNT_CASES):
            raise CheckFailed(f"{call} returned {got:,}; the model trains {expected:,}. {message}")
    where = ("" if named else f"It is right on the {len(TRAINED_COUNT_CASES)} fixed cases; this is the smallest of "
             f"{DRAWN_COUNT_EXAMPLES} drawn models where it is not. ")
    raise CheckFailed(
        f"{call} returned {got:,}; the model trains {expected:,}, off by {got - expected:+,}. {where}No single "
        f"mistake we know gives your counts on every case; this model trains {_count_parts(*case)}: count each "
        "part on its own and compare with print(model). Likely causes: a branch of your code that only this "
        "placement or LayerNorm choice reaches, or a size written in for one model."
    )


@plain_errors
def check_trained_count(count_fn) -> None:
    """Check ``count_fn(d, n_layers, r, placement, train_layernorm, num_labels) -> int`` (lab 4).

    The answer is everything a task trains in a BERT classifier with adapters, as adapterlab.placement
    sets it up by default: the adapters, the LayerNorms when train_layernorm, and the classifier; the
    pretrained pooler stays frozen, as in the original adapter-bert code. The reference counts
    requires_grad parameters of a real model built on the meta device, on the fixed cases and then on
    models hypothesis draws.
    """
    name = _name(count_fn)
    for case in TRAINED_COUNT_CASES:
        _check_count(name, count_fn, case)
    failing = smallest_failing(_drawn_count_cases(), lambda case: not _counts_right(count_fn, case),
                               DRAWN_COUNT_EXAMPLES)
    if failing is not None:
        _check_count(name, count_fn, failing, named=False)
    report_passed(
        f"Your count matches a real model on all {len(TRAINED_COUNT_CASES)} cases, e.g. BERT-large, Pfeiffer, r = 64, "
        f"LayerNorms and classifier: {_counted_model(*TRAINED_COUNT_CASES[0]):,} trained per task, and on "
        f"{DRAWN_COUNT_EXAMPLES} drawn models."
    )


# --------------------------------------------------------------------------------------------------
# Lab 5: which parameters a placement trains
# --------------------------------------------------------------------------------------------------

PLACEMENT_CASES = [
    (placement, train_layernorm) for placement in ("houlsby", "pfeiffer", "parallel") for train_layernorm in (True, False)
]


def _tiny_bert(layers: int = 2):
    """A random BertForSequenceClassification on the meta device: real names, no memory."""
    from transformers import BertConfig, BertForSequenceClassification  # imported here: the other checks do without it

    config = BertConfig(
        hidden_size=32, num_hidden_layers=layers, num_attention_heads=2, intermediate_size=64, vocab_size=100,
        max_position_embeddings=16,
    )
    with torch.device("meta"):
        return BertForSequenceClassification(config)


def _layer_of(name: str) -> int | None:
    match = re.match(r"bert\.encoder\.layer\.(\d+)\.", name)
    return int(match[1]) if match else None


#: An adapter at either sublayer output of an encoder layer: the names some placement gives it.
_ADAPTER_NAME = re.compile(r"bert\.encoder\.layer\.\d+\.(attention\.output|output)\.adapter\.(down|up)\.(weight|bias)")


def _name_kind(name: str) -> str:
    """What a parameter name belongs to, in words a student recognises."""
    if ".adapter." in name:
        return "attention adapter" if ".attention.output.adapter." in name else "FFN adapter"
    if "LayerNorm" in name:
        if name.startswith("bert.embeddings."):
            return "embeddings LayerNorm"
        return "attention LayerNorm" if ".attention.output.LayerNorm" in name else "FFN LayerNorm"
    if ".pooler." in name:
        return "pooler"
    if name.startswith("classifier."):
        return "classifier"
    return "backbone weight"


def _diagnose_names(missing: set, extra: set, existing: set, placement: str, got: set = frozenset()) -> str:
    layers = {_layer_of(name) for name in existing} - {None}
    off = {_layer_of(name) for name in missing | extra}
    anywhere = {re.sub(r"\.layer\.\d+\.", ".layer.N.", name) for name in got}
    right_elsewhere = all(re.sub(r"\.layer\.\d+\.", ".layer.N.", name) in anywhere for name in missing)
    if missing and right_elsewhere and None not in off and len(off) < len(layers) and len(layers) > 2:
        return (f"Your set is right for some layers but wrong for layers {', '.join(map(str, sorted(off)))} of this "
                f"{len(layers)}-layer BERT. Take each layer's number from its name as a whole number (BERT-base's go "
                "up to 11, two digits), and do not assume how many layers there are.")
    absent = sorted({_layer_of(name) for name in extra} - layers - {None})
    if absent:
        return (f"Your set names layers {', '.join(map(str, absent))}, which this {len(layers)}-layer BERT does not "
                "have: you assumed a number of layers (BERT-base's 12?). Build the adapters' names from the names "
                "you are given, so that they follow the model's own depth.")
    unknown = sorted(name for name in extra if name not in existing and not _ADAPTER_NAME.fullmatch(name))
    if unknown:
        return (
            f"These names are not parameters of the model: {', '.join(unknown[:2])}"
            f"{' …' if len(unknown) > 2 else ''}. An adapter added at a sublayer's output module P has the "
            "parameters P.adapter.down.weight, P.adapter.down.bias, P.adapter.up.weight and P.adapter.up.bias."
        )
    kinds_missing = {_name_kind(name) for name in missing}
    kinds_extra = {_name_kind(name) for name in extra}
    positions = "after the attention output and after the FFN output" if placement == "houlsby" else (
        "at the FFN's output module only" if placement == "pfeiffer" else "beside the FFN, added in at its output module")
    if "attention adapter" in kinds_extra or "FFN adapter" in kinds_missing or "attention adapter" in kinds_missing:
        return f"Your adapters are in the wrong position: {placement} puts its adapters {positions}."
    if kinds_extra == {"embeddings LayerNorm"}:
        return "You included the embeddings LayerNorm: with train_layernorm=False it stays frozen like every other one."
    if kinds_extra & {"embeddings LayerNorm", "attention LayerNorm", "FFN LayerNorm"}:
        return "With train_layernorm=False every LayerNorm stays frozen (as in AdapterHub); leave them out."
    if "embeddings LayerNorm" in kinds_missing and len(kinds_missing) == 1:
        return "You forgot the embeddings LayerNorm: BERT has one after the embeddings as well as two in every layer."
    if "attention LayerNorm" in kinds_missing and "FFN LayerNorm" not in kinds_missing:
        return "You forgot the attention LayerNorms: every layer has one after attention as well as one after the FFN."
    if kinds_missing & {"attention LayerNorm", "FFN LayerNorm", "embeddings LayerNorm"}:
        return "You left out LayerNorms: with train_layernorm=True the paper's recipe trains every one of them."
    if "pooler" in kinds_extra and "classifier" in kinds_missing:
        return (f"You included the pooler instead of the classifier: {POOLER_STAYS_FROZEN}, and the classifier "
                "is new, so every task trains it.")
    if "pooler" in kinds_extra:
        return f"You included the pooler, but {POOLER_STAYS_FROZEN}."
    if "classifier" in kinds_missing:
        left_out = sorted(name.split(".")[-1] for name in missing if _name_kind(name) == "classifier")
        if left_out != ["bias", "weight"]:
            return (f"You left out the classifier's {' and '.join(left_out)}: the task's own layer is always trained, "
                    "every parameter of it.")
        return "You left out the classifier: the task's own layer is always trained."
    if "backbone weight" in kinds_extra:
        example = sorted(name for name in extra if _name_kind(name) == "backbone weight")[0]
        return (f"You included frozen backbone weights such as {example}: only adapters, LayerNorms and the "
                "classifier train.")
    listed = sorted(missing)[:2] + sorted(extra)[:2]
    return (f"Your set differs from the model's: for example {', '.join(listed)}. Compare your names with "
            "model.named_parameters() after add_adapters, group by group.")


@plain_errors
def check_trained_names(names_fn) -> None:
    """Check ``names_fn(names, placement, train_layernorm) -> set`` against a real model (lab 5).

    ``names`` are the parameter names of a BERT classifier before adapters are added; the answer is the
    set of names that train after ``add_adapters(model, placement, train_layernorm=...)``. The reference
    is ``requires_grad`` of a BERT with BERT-base's 12 layers (so its names) and of a 2-layer one, with
    adapters really added, for every placement and both LayerNorm choices.
    """
    name = _name(names_fn)
    fixed = [(layers, *case) for layers in (12, 2) for case in PLACEMENT_CASES]
    for case in fixed:
        _check_names_case(name, names_fn, *case)

    def fails(case) -> bool:
        names, expected, _ = _bert_names(*case)
        got = names_fn(list(names), *case[1:])
        listed = isinstance(got, (set, frozenset, list, tuple))
        return not listed or len(set(got)) != len(got) or set(got) != expected

    failing = smallest_failing(_drawn_name_cases(), fails, DRAWN_NAME_MODELS)
    if failing is not None:
        layers, placement, train_layernorm = failing
        _drawn_case_failed("your set", len(fixed), f"{DRAWN_NAME_MODELS} drawn BERTs of 1 to {DRAWN_NAME_LAYERS} layers",
                           f"{layers} layer{'s' * (layers > 1)}, {placement}, train_layernorm={train_layernorm}",
                           lambda: _check_names_case(name, names_fn, *failing),
                           "a number of layers written in (BERT-large has 24), or a branch only some depths reach")
    report_passed(
        "Your sets match requires_grad of a real BERT with adapters for all three placements, LayerNorms trained "
        f"and frozen, at BERT-base's 12 layers, at 2, and on {DRAWN_NAME_MODELS} drawn depths up to "
        f"{DRAWN_NAME_LAYERS}."
    )


#: Depths drawn for the names check: up to BERT-large's 24 layers, where a ``range(12)`` written in shows.
DRAWN_NAME_MODELS, DRAWN_NAME_LAYERS = 30, 24


def _drawn_name_cases():
    """(layers, placement, train_layernorm) drawn by hypothesis; a failing case shrinks to the shallowest BERT."""
    from hypothesis import strategies as st

    return st.tuples(st.integers(1, DRAWN_NAME_LAYERS), st.sampled_from(("houlsby", "pfeiffer", "parallel")),
                     st.booleans())


@functools.cache
def _bert_names(layers: int, placement: str, train_layernorm: bool):
    """A BERT classifier's parameter names before adapters, the set that trains once they are added, and every
    name after: requires_grad of a real model on the meta device, made once a session per case (hypothesis asks
    for the same depths again while it shrinks)."""
    names = tuple(n for n, _ in _tiny_bert(layers).named_parameters())
    with torch.random.fork_rng():  # drawing the adapters must not shift the notebook's generator
        model = add_adapters(_tiny_bert(layers), placement, 4, train_layernorm=train_layernorm)
    expected = frozenset(n for n, p in model.named_parameters() if p.requires_grad)
    return names, expected, frozenset(n for n, _ in model.named_parameters())


def _check_names_case(name: str, names_fn, layers: int, placement: str, train_layernorm: bool) -> None:
    names, expected, existing = _bert_names(layers, placement, train_layernorm)
    call = f"{name}(names, {placement!r}, train_layernorm={train_layernorm})"
    got = call_answer(call, names_fn, list(names), placement, train_layernorm)
    if isinstance(got, str) or not isinstance(got, (set, frozenset, list, tuple)):
        raise CheckFailed(f"{call} returned a {type(got).__name__}; return a set of parameter names.")
    if not all(isinstance(item, str) for item in got):
        raise CheckFailed(f"{call} returned a set holding {type(next(iter(got))).__name__}s; return parameter "
                          "names, the strings of model.named_parameters().")
    twice = sorted({item for item in got if list(got).count(item) > 1})
    if twice:
        raise CheckFailed(f"{call} lists {twice[0]} {list(got).count(twice[0])} times"
                          f"{f' (and {len(twice) - 1} other names more than once)' if len(twice) > 1 else ''}: "
                          "return a set, each name once (build it with a set, or wrap your list in set(...)).")
    got = set(got)
    if got != expected:
        problem = _diagnose_names(expected - got, got - expected, existing, placement, got)
        raise CheckFailed(f"{call}: {problem}")
