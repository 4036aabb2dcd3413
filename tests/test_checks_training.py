"""The training labs' self-checks accept a right answer, report a stub as missing, and reject each
mistake in their catalogue with a message that names it."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
import torch

from adapterlab import checks_training as ct
from adapterlab.teaching.exercises import checks
from adapterlab.checkpoints import load_adapter_set
from adapterlab.placement import encoder_layers, set_adapters_enabled, set_trainable

MISSING = "The answer is missing"


def _fails(check, *answers, words=()):
    with pytest.raises(ct.CheckFailed) as caught:
        check(*answers)
    message = str(caught.value)
    for word in words:
        assert word in message, message
    return message


def _stub(*args):
    raise NotImplementedError("write your solution here")


# --------------------------------------------------------------------------------------------------
# Lab 6: check_training_step
# --------------------------------------------------------------------------------------------------

#: What trains (adapter-bert's policy): adapters, LayerNorms and the classifier; the pooler stays frozen.
HEAD_AND_NORMS = ("adapter", "LayerNorm", "classifier")


def prepare_by_name(model, learning_rate):
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(any(key in name for key in HEAD_AND_NORMS))
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def prepare_with_policy(model, learning_rate):
    set_trainable(model, "adapters")
    return torch.optim.AdamW((p for p in model.parameters() if p.requires_grad), lr=learning_rate, weight_decay=0.1)


def step(model, optimizer, batch):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_zeroing_first(model, optimizer, batch):
    optimizer.zero_grad(set_to_none=False)
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return loss.item()


def step_logging_first(model, optimizer, batch):
    """Right, with an extra forward without autograd to log the loss before the update (it draws dropout too)."""
    with torch.no_grad():
        logged = model(**batch).loss.item()
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    assert logged > 0
    return loss.item()


def step_with_own_cross_entropy(model, optimizer, batch):
    """Right, written another way: the logits through F.cross_entropy, the gradients set to None first."""
    optimizer.zero_grad(set_to_none=True)
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss = torch.nn.functional.cross_entropy(logits, batch["labels"])
    loss.backward()
    optimizer.step()
    return float(loss)


def step_with_summed_loss(model, optimizer, batch):
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    loss = torch.nn.functional.cross_entropy(logits, batch["labels"], reduction="sum")
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item() / len(batch["labels"])


def step_returning_the_tensor(model, optimizer, batch):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss


def prepare_unfrozen(model, learning_rate):
    return torch.optim.AdamW(model.parameters(), lr=learning_rate)


def prepare_before_freezing(model, learning_rate):
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.5)
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(any(key in name for key in HEAD_AND_NORMS))
    return optimizer


def prepare_adapters_only(model, learning_rate):
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("adapter" in name or "classifier" in name)
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def prepare_pooler_trained(model, learning_rate):
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(any(key in name for key in HEAD_AND_NORMS + ("pooler",)))
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def prepare_head_frozen(model, learning_rate):
    for name, parameter in model.named_parameters():
        parameter.requires_grad_("adapter" in name or "LayerNorm" in name)
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def prepare_missing_norms_in_optimizer(model, learning_rate):
    prepare_by_name(model, learning_rate)
    return torch.optim.AdamW([p for n, p in model.named_parameters() if "adapter" in n], lr=learning_rate)


def step_without_zero_grad(model, optimizer, batch):
    loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    return loss.item()


def step_without_step(model, optimizer, batch):
    loss = model(**batch).loss
    loss.backward()
    optimizer.zero_grad()
    return loss.item()


def step_without_backward(model, optimizer, batch):
    loss = model(**batch).loss
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_returning_nothing(model, optimizer, batch):
    step(model, optimizer, batch)


def prepare_fixed_rate(model, learning_rate):
    set_trainable(model, "adapters")
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=2e-5)


def prepare_sgd(model, learning_rate):
    set_trainable(model, "adapters")
    return torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def prepare_adam(model, learning_rate):
    set_trainable(model, "adapters")
    return torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=learning_rate, weight_decay=0.01)


def prepare_head_listed_twice(model, learning_rate):
    set_trainable(model, "adapters")
    trainable = [p for p in model.parameters() if p.requires_grad]
    with pytest.warns(UserWarning):
        return torch.optim.AdamW(trainable + [model.classifier.weight], lr=learning_rate)


def prepare_norms_of_three_layers(model, learning_rate):
    """LayerNorms of layers 0–2 only: right on a 3-layer model, not on BERT-base's 12."""
    for name, parameter in model.named_parameters():
        norm = "LayerNorm" in name and (name.startswith("bert.embeddings") or any(f"layer.{i}." in name for i in range(3)))
        parameter.requires_grad_("adapter" in name or "classifier" in name or norm)
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)


def step_without_mask(model, optimizer, batch):
    loss = model(input_ids=batch["input_ids"], labels=batch["labels"]).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_in_eval_mode(model, optimizer, batch):
    model.eval()
    return step(model, optimizer, batch)


def step_under_no_grad(model, optimizer, batch):
    with torch.no_grad():
        loss = model(**batch).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@pytest.mark.parametrize(
    "prepare, train_step, words",
    [
        (prepare_fixed_rate, step, ("learning rate is 2e-05", "use the argument")),
        (prepare_sgd, step, ("SGD optimizer", "AdamW")),
        (prepare_adam, step, ("Adam optimizer", "AdamW")),
        (prepare_head_listed_twice, step, ("classifier.weight twice",)),
        (prepare_norms_of_three_layers, step, ("should train are frozen", "LayerNorm")),
        (prepare_by_name, step_without_mask, ("attention mask",)),
        (prepare_by_name, step_in_eval_mode, ("evaluation mode", "dropout")),
        (prepare_by_name, step_under_no_grad, ("raised RuntimeError", "torch.no_grad()")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_training_step_checks_what_the_exercise_asks(prepare, train_step, words):
    _fails(ct.check_training_step, prepare, train_step, words=words)


def test_training_step_accepts_right_answers(capsys):
    ct.check_training_step(prepare_by_name, step)
    ct.check_training_step(prepare_with_policy, step_zeroing_first)
    assert capsys.readouterr().out.startswith("✔")


def prepare_at_the_rates_shown(model, learning_rate):
    """Right at the two rates the fixed cases use, and a rate of its own for any other."""
    prepare_by_name(model, learning_rate)
    rate = learning_rate if learning_rate in (3e-4, ct.TRAINING_LR) else 1e-3
    return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=rate)


def prepare_for_three_layers_or_more(model, learning_rate):
    """Freezes layer 0's adapters in a model of fewer than three layers: right on the fixed 12- and 3-layer ones."""
    optimizer = prepare_by_name(model, learning_rate)
    if len(encoder_layers(model)) < 3:
        for name, parameter in model.named_parameters():
            if ".layer.0." in name and ".adapter." in name:
                parameter.requires_grad_(False)
        return torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=learning_rate)
    return optimizer


@pytest.mark.parametrize(
    "answer, words",
    [
        (prepare_at_the_rates_shown, ("Right on the 2 fixed cases", "1 layer, learning_rate=", "use the argument")),
        (prepare_for_three_layers_or_more, ("Right on the 2 fixed cases", "1 layer,", "are frozen", ".layer.0.")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_training_step_draws_models_and_rates_for_the_optimizer(answer, words):
    _fails(ct.check_training_step, answer, step, words=words)


@pytest.mark.parametrize("train_step", [step_logging_first, step_with_own_cross_entropy])
def test_training_step_accepts_right_steps_written_differently(train_step, capsys):
    ct.check_training_step(prepare_by_name, train_step)
    assert capsys.readouterr().out.splitlines()[-1].startswith("✔")  # after a note, if torch warned about float(loss)


def test_training_step_names_a_summed_loss_and_a_returned_graph():
    message = _fails(ct.check_training_step, prepare_by_name, step_with_summed_loss,
                     words=("6 times", "summed over the batch's 6 examples", "the mean"))
    assert "loss.backward()" not in message
    _fails(ct.check_training_step, prepare_by_name, step_returning_the_tensor,
           words=("loss tensor itself", "autograd graph", "loss.item()"))


@pytest.mark.parametrize(
    "prepare, train_step, words",
    [
        (prepare_unfrozen, step, ("not frozen",)),
        (prepare_before_freezing, step, ("frozen tensors", "built over every parameter")),
        (prepare_adapters_only, step, ("LayerNorm",)),
        (prepare_head_frozen, step, ("classifier", "must train")),
        (prepare_pooler_trained, step, ("pooler still requires grad", "the pooler stays frozen",
                                        "adapters, LayerNorms and the classifier only")),
        (prepare_missing_norms_in_optimizer, step, ("leaves out",)),
        (prepare_by_name, step_without_zero_grad, ("accumulate", "zero_grad")),
        (prepare_by_name, step_without_step, ("never calls optimizer.step()",)),
        (prepare_by_name, step_without_backward, ("never backpropagated", "loss.backward()")),
        (prepare_by_name, step_returning_nothing, ("return the loss",)),
    ],
)
def test_training_step_names_the_mistake(prepare, train_step, words):
    _fails(ct.check_training_step, prepare, train_step, words=words)


def test_an_optimizer_over_frozen_tensors_leaves_them_untouched():
    """What the check's message claims: AdamW skips tensors without a gradient, weight decay included."""
    layer = torch.nn.Linear(4, 3)
    layer.weight.requires_grad_(False)
    frozen, bias = layer.weight.detach().clone(), layer.bias.detach().clone()
    optimizer = torch.optim.AdamW(layer.parameters(), lr=0.1, weight_decay=0.5)
    layer(torch.randn(2, 4)).sum().backward()
    optimizer.step()
    assert torch.equal(layer.weight, frozen)
    assert not torch.equal(layer.bias, bias)


def test_training_step_reports_a_stub_as_missing():
    _fails(ct.check_training_step, _stub, step, words=(MISSING,))
    _fails(ct.check_training_step, prepare_by_name, _stub, words=(MISSING,))


# --------------------------------------------------------------------------------------------------
# Lab 7: check_matthews
# --------------------------------------------------------------------------------------------------


def _confusion(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    return (int(np.sum((labels == 1) & (predictions == 1))), int(np.sum((labels == 0) & (predictions == 0))),
            int(np.sum((labels == 0) & (predictions == 1))), int(np.sum((labels == 1) & (predictions == 0))))


def matthews(labels, predictions):
    tp, tn, fp, fn = _confusion(labels, predictions)
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def matthews_fp_fn_swapped(labels, predictions):
    """Harmless: the formula is symmetric in FP and FN, so this is right too."""
    tp, tn, fn, fp = _confusion(labels, predictions)
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def accuracy(labels, predictions):
    return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def matthews_tn_fn_swapped(labels, predictions):
    tp, fn, fp, tn = _confusion(labels, predictions)
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def matthews_without_root(labels, predictions):
    tp, tn, fp, fn = _confusion(labels, predictions)
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    return (tp * tn - fp * fn) / denominator if denominator else 0.0


def matthews_plus(labels, predictions):
    tp, tn, fp, fn = _confusion(labels, predictions)
    denominator = ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5
    return (tp * tn + fp * fn) / denominator if denominator else 0.0


def matthews_dividing_by_zero(labels, predictions):
    tp, tn, fp, fn = _confusion(labels, predictions)
    return (tp * tn - fp * fn) / ((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)) ** 0.5


def matthews_nan(labels, predictions):
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp, tn = np.sum((labels == 1) & (predictions == 1)), np.sum((labels == 0) & (predictions == 0))
    fp, fn = np.sum((labels == 0) & (predictions == 1)), np.sum((labels == 1) & (predictions == 0))
    return (tp * tn - fp * fn) / np.sqrt(float((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)))


def test_matthews_reference_is_scikit_learns():
    metrics = pytest.importorskip("sklearn.metrics")
    for _, labels, predictions in ct._matthews_cases():
        reference = ct._correlation(labels.astype(float), predictions.astype(float))
        assert reference == pytest.approx(metrics.matthews_corrcoef(labels, predictions), abs=1e-12)


def test_matthews_accepts_right_answers(capsys):
    ct.check_matthews(matthews)
    ct.check_matthews(matthews_fp_fn_swapped)
    out = capsys.readouterr().out
    assert out.startswith("✔") and f"on {ct.DRAWN_LABEL_SETS} drawn label sets" in out


@pytest.mark.parametrize(
    "answer, words",
    [
        (accuracy, ("accuracy",)),
        (matthews_tn_fn_swapped, ("swapped TN and FN",)),
        (matthews_without_root, ("square root",)),
        (matthews_plus, ("wrong sign",)),
        (matthews_dividing_by_zero, ("ZeroDivisionError", "return 0.0 instead of dividing")),
        (matthews_nan, ("nan", "return 0.0 instead of dividing")),
    ],
)
def test_matthews_names_the_mistake(answer, words):
    _fails(ct.check_matthews, answer, words=words)


def matthews_int32(labels, predictions):
    """Counts as dot products: int32 arrays give int32 counts, and the product under the root overflows."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    tp, fp = labels @ predictions, (1 - labels) @ predictions
    fn, tn = labels @ (1 - predictions), (1 - labels) @ (1 - predictions)
    with np.errstate(all="ignore"):
        denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
        return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def matthews_perfect_is_one(labels, predictions):
    if np.array_equal(labels, predictions):
        return 1.0
    return matthews(labels, predictions)


def matthews_zero_only_for_all_ones(labels, predictions):
    """Handles the constant predictor 'always 1' only; 'always 0' divides by zero."""
    if np.all(np.asarray(predictions) == 1):
        return 0.0
    return matthews_dividing_by_zero(labels, predictions)


def matthews_guarding_the_cases_it_thought_of(labels, predictions):
    """Guards constant predictions and labels without a 0, but not labels without a 1 (all negative)."""
    labels, predictions = np.asarray(labels), np.asarray(predictions)
    if len(set(predictions.tolist())) == 1 or np.all(labels == 1):
        return 0.0
    return matthews_dividing_by_zero(labels, predictions)


def matthews_rounded(labels, predictions):
    return round(matthews(labels, predictions), 2)


@pytest.mark.parametrize(
    "answer, words",
    [
        (matthews_int32, ("CoLA's size", "32-bit", "int(")),
        (matthews_perfect_is_one, ("perfect predictions of labels of one class only", "defined as 0")),
        (matthews_zero_only_for_all_ones, ("always 0", "return 0.0 instead of dividing")),
        (matthews_guarding_the_cases_it_thought_of, ("no 1 at all", "return 0.0 instead of dividing")),
        (matthews_rounded, ("the Matthews correlation is", "rounded the score to 2 decimal places")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_matthews_degenerate_cases_and_cola_sizes(answer, words):
    _fails(ct.check_matthews, answer, words=words)


def two_accuracy_minus_one(labels, predictions):
    """2·accuracy − 1: on the check's first case it equals the score rounded to 2 decimals, nowhere else."""
    return 2 * float(np.mean(np.asarray(labels) == np.asarray(predictions))) - 1


def test_matthews_names_a_mistake_only_where_the_answer_makes_it_on_every_case():
    """A number equal to one mistake's on the failing case is no diagnosis: the answer is told what was measured."""
    message = _fails(ct.check_matthews, two_accuracy_minus_one, words=("40 random labels", "returned", "the Matthews "
                                                                       "correlation is", "Count TP, TN, FP and FN"))
    assert not any(mistake in message for _, mistake in ct._MATTHEWS_MISTAKES)


def test_matthews_shows_an_answer_right_only_on_the_fixed_sets_the_smallest_drawn_set_it_gets_wrong():
    """The fixed sets are 12 labels or more: an answer that goes wrong on short ones (here it takes a pair of
    2 labels for a constant one) passes them all, and is shown the smallest drawn set it gets wrong."""
    def short_sets_as_constant(labels, predictions):
        return 0.0 if len(labels) < 12 else matthews(labels, predictions)

    message = _fails(ct.check_matthews, short_sets_as_constant,
                     words=("the drawn labels [0, 1] and predictions [0, 1]", "returned 0.0000", "is 1.0000",
                            "Count TP, TN, FP and FN"))
    assert not any(mistake in message for _, mistake in ct._MATTHEWS_MISTAKES)


def test_matthews_reports_a_stub_as_missing():
    _fails(ct.check_matthews, _stub, words=(MISSING,))


# --------------------------------------------------------------------------------------------------
# Lab 8: check_span_ablation
# --------------------------------------------------------------------------------------------------


def ablate(model, score, layers=None):
    """The loop the lab asks for (``layers``: a number of layers written in, not read from the model)."""
    n, scores = layers or len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            try:
                scores[i, j] = score(model)
            finally:
                set_adapters_enabled(model, True)
    return scores


def ablate_never_restoring(model, score):
    n, scores = len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            scores[i, j] = score(model)
    return scores


def ablate_j_exclusive(model, score):
    n, scores = len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            if j > i:
                set_adapters_enabled(model, False, layers=list(range(i, j)))
            try:
                scores[i, j] = score(model)
            finally:
                set_adapters_enabled(model, True)
    return scores


def ablate_all_layers(model, score):
    n, scores = len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            set_adapters_enabled(model, False)
            try:
                scores[i, j] = score(model)
            finally:
                set_adapters_enabled(model, True)
    return scores


def ablate_restoring_last_span(model, score):
    n, scores, span = len(encoder_layers(model)), {}, []
    for i in range(n):
        for j in range(i, n):
            span = list(range(i, j + 1))
            set_adapters_enabled(model, False, layers=span)
            scores[i, j] = score(model)
    set_adapters_enabled(model, True, layers=span)
    return scores


def ablate_without_finally(model, score):
    n, scores = len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            scores[i, j] = score(model)
            set_adapters_enabled(model, True)
    return scores


def ablate_swallowing_errors(model, score):
    n, scores = len(encoder_layers(model)), {}
    for i in range(n):
        for j in range(i, n):
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            try:
                scores[i, j] = score(model)
            except RuntimeError:
                scores[i, j] = float("nan")
            finally:
                set_adapters_enabled(model, True)
    return scores


def ablate_by_zeroing(model, score):
    """Switches adapters off by zeroing their up-projections, and never puts the weights back."""
    n, scores = len(encoder_layers(model)), {}
    saved = copy.deepcopy(model.state_dict())
    for i in range(n):
        for j in range(i, n):
            model.load_state_dict(saved)
            set_adapters_enabled(model, False, layers=list(range(i, j + 1)))
            scores[i, j] = score(model)
            set_adapters_enabled(model, True)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "adapter.up" in name:
                parameter.zero_()
    return scores


def test_span_ablation_accepts_the_right_loop(capsys):
    ct.check_span_ablation(ablate)
    out = capsys.readouterr().out
    assert out.startswith("✔") and "6 drawn models of 1 to 8 layers" in out


def ablate_for_the_two_depths_shown(model, score):
    """Right for the 12 and 5 layers the fixed cases have: a depth guessed from a size, not read from the model."""
    return ablate(model, score, layers=12 if len(encoder_layers(model)) > 6 else 5)


def test_span_ablation_draws_depths_and_shows_the_shallowest_that_fails():
    _fails(ct.check_span_ablation, ablate_for_the_two_depths_shown,
           words=("Right on the 4 fixed cases", "1 layer in", "a number of layers written in", "a model of 1 layer raised"))


@pytest.mark.parametrize(
    "answer, words",
    [
        (ablate_never_restoring, ("stay off while the next span",)),
        (ablate_j_exclusive, ("one layer short", "range(i, j + 1)")),
        (ablate_all_layers, ("all adapters off", "only the layers i..j")),
        (ablate_restoring_last_span, ("stay off while the next span",)),
        (ablate_without_finally, ("finally",)),
        (ablate_swallowing_errors, ("let the error reach the caller",)),
        (ablate_by_zeroing, ("weights or outputs differ",)),
    ],
)
def test_span_ablation_names_the_mistake(answer, words):
    _fails(ct.check_span_ablation, answer, words=words)


def ablate_in_eval_mode(model, score):
    model.eval()  # sensible for an evaluation, but never undone
    return ablate(model, score)


def ablate_without_autograd(model, score):
    torch.set_grad_enabled(False)  # "no gradients needed here", for the rest of the notebook too
    return ablate(model, score)


def ablate_freezing_everything(model, score):
    model.requires_grad_(False)
    return ablate(model, score)


def ablate_counting_passes(model, score):
    passes = []
    model.register_forward_pre_hook(lambda module, args: passes.append(1))  # never removed
    return ablate(model, score)


def ablate_written_for(layers: int):
    """A loop written for a model of ``layers`` layers: the number of layers is not read from the model."""
    def ablate_fixed(model, score):
        return ablate(model, score, layers)

    ablate_fixed.__name__ = f"ablate_{layers}_layers"
    return ablate_fixed


def ablate_eval_restored_only_on_success(model, score):
    mode = model.training
    model.eval()
    scores = ablate(model, score)
    model.train(mode)
    return scores


def ablate_with_the_package(model, score):
    from adapterlab.ablation import span_ablation

    result = span_ablation(model, None, metric="score", progress=False,
                           evaluate=lambda m, data, batch_size, device: {"score": score(m)})
    n = len(encoder_layers(model))
    return {(i, j): float(result.scores[i, j]) for i in range(n) for j in range(i, n)}


@pytest.mark.parametrize(
    "answer, words",
    [
        (ablate_with_the_package, ("calls the package's span_ablation",)),
        (ablate_in_eval_mode, ("evaluation mode", "came in training mode")),
        (ablate_without_autograd, ("autograd switched off",)),
        (ablate_freezing_everything, ("require grad",)),
        (ablate_counting_passes, ("hooks registered on the model", "handle.remove()")),
        (ablate_written_for(4), ("78 spans", "Those are the spans of 4 layers, and this model has 12")),
        # written for BERT-base: right on every 12-layer model, and only there
        (ablate_written_for(12), ("model of 5 layers raised PlacementError", "does your loop take their number")),
        (ablate_eval_restored_only_on_success, ("raised an error halfway", "evaluation mode")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_span_ablation_checks_every_part_of_the_restore(answer, words):
    grad_mode = torch.is_grad_enabled()
    try:
        _fails(ct.check_span_ablation, answer, words=words)
        assert torch.is_grad_enabled() == grad_mode  # the check itself gives the grad mode back
    finally:
        torch.set_grad_enabled(grad_mode)


def ablate_ending_in_training_mode(model, score):
    """Evaluates in evaluation mode and 'restores' by model.train(): right only for a model that came in training."""
    model.eval()
    try:
        return ablate(model, score)
    finally:
        model.train()


def ablate_zeroing_w_up(model, score):
    """Switches a span off by zeroing the W_up of its adapters, and puts them back: off only while b_up is zero."""
    n, scores = len(encoder_layers(model)), {}
    ups = {name: p for name, p in model.named_parameters() if name.endswith("adapter.up.weight")}
    for i in range(n):
        for j in range(i, n):
            span = [name for name in ups if i <= int(name.split(".")[3]) <= j]
            saved = {name: ups[name].detach().clone() for name in span}
            try:
                with torch.no_grad():
                    for name in span:
                        ups[name].zero_()
                scores[i, j] = score(model)
            finally:
                with torch.no_grad():
                    for name in span:
                        ups[name].copy_(saved[name])
    return scores


def ablate_restoring_on_exception(model, score):
    """Restores after each span and in `except Exception:` around the score: a Ctrl-C is not an Exception."""
    def guarded(model):
        try:
            return score(model)
        except Exception:
            set_adapters_enabled(model, True)
            raise

    return ablate_without_finally(model, guarded)


@pytest.mark.parametrize(
    "answer, words",
    [
        (ablate_ending_in_training_mode, ("leaves the model in training mode", "came in evaluation mode")),
        (ablate_zeroing_w_up, ("zeroing W_up", "b_up still adds", "set_adapters_enabled")),
        (ablate_restoring_on_exception, ("interrupted", "KeyboardInterrupt", "finally:")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_span_ablation_probes_both_modes_non_zero_biases_and_ctrl_c(answer, words):
    _fails(ct.check_span_ablation, answer, words=words)


def test_span_ablation_reports_a_stub_as_missing():
    _fails(ct.check_span_ablation, _stub, words=(MISSING,))


# --------------------------------------------------------------------------------------------------
# Lab 9: check_serving
# --------------------------------------------------------------------------------------------------


def _groups(requests):
    groups = {}
    for index, (task, _) in enumerate(requests):
        groups.setdefault(task, []).append(index)
    return groups


def _run(model, requests, indices):
    with torch.no_grad():
        return model(input_ids=torch.stack([requests[k][1] for k in indices])).logits


def serve(model, adapter_sets, requests):
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        load_adapter_set(model, adapter_sets[task])
        for k, row in zip(indices, _run(model, requests, indices)):
            outputs[k] = row
    return outputs


def serve_one_task(model, adapter_sets, requests):
    load_adapter_set(model, adapter_sets[requests[0][0]])
    return list(_run(model, requests, range(len(requests))))


def serve_grouped_order(model, adapter_sets, requests):
    outputs = []
    for task, indices in _groups(requests).items():
        load_adapter_set(model, adapter_sets[task])
        outputs.extend(_run(model, requests, indices))
    return outputs


def serve_loading_after_running(model, adapter_sets, requests):
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        for k, row in zip(indices, _run(model, requests, indices)):
            outputs[k] = row
        load_adapter_set(model, adapter_sets[task])
    return outputs


def serve_never_loading(model, adapter_sets, requests):
    return list(_run(model, requests, range(len(requests))))


def serve_one_by_one(model, adapter_sets, requests):
    outputs = []
    for task, ids in requests:
        load_adapter_set(model, adapter_sets[task])
        outputs.append(_run(model, [(task, ids)], [0])[0])
    return outputs


def serve_on_a_copy_per_task(model, adapter_sets, requests):
    """Right answers, but every task gets its own deep copy of the whole backbone."""
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        own = copy.deepcopy(model)
        load_adapter_set(own, adapter_sets[task])
        for k, row in zip(indices, _run(own, requests, indices)):
            outputs[k] = row
    return outputs


def serve_in_training_mode(model, adapter_sets, requests):
    model.train()  # "the model should be ready", but dropout is on now
    return serve(model, adapter_sets, requests)


def serve_keeping_the_graph(model, adapter_sets, requests):
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        load_adapter_set(model, adapter_sets[task])
        logits = model(input_ids=torch.stack([requests[k][1] for k in indices])).logits
        for k, row in zip(indices, logits):
            outputs[k] = row
    return outputs


@pytest.mark.parametrize(
    "answer, words",
    [
        (serve_on_a_copy_per_task, ("copy of the model", "one shared backbone")),
        (serve_in_training_mode, ("training mode", "dropout")),
        (serve_keeping_the_graph, ("autograd graph", "torch.inference_mode()")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_serving_sees_copies_training_mode_and_a_kept_graph(answer, words):
    _fails(ct.check_serving, answer, words=words)


def test_serving_accepts_the_grouped_server(capsys):
    ct.check_serving(serve)
    assert capsys.readouterr().out.startswith("✔")


@pytest.mark.parametrize(
    "answer, words",
    [
        (serve_one_task, ("Every request was answered with the 'grammar' adapter set",)),
        (serve_never_loading, ("Every request was answered with the 'topic' adapter set",)),
        (serve_grouped_order, ("grouped order",)),
        (serve_loading_after_running, ("still loaded from before", "before running that group")),
        (serve_one_by_one, ("forward passes", "batch each task's requests together")),
    ],
)
def test_serving_names_the_mistake(answer, words):
    _fails(ct.check_serving, answer, words=words)


def serve_loading_per_request(model, adapter_sets, requests):
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        for _ in indices:  # one load per request, then one pass per task
            load_adapter_set(model, adapter_sets[task])
        for k, row in zip(indices, _run(model, requests, indices)):
            outputs[k] = row
    return outputs


def serve_every_row_per_task(model, adapter_sets, requests):
    """One pass per task, but each pass runs every request and keeps the task's rows."""
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        load_adapter_set(model, adapter_sets[task])
        everything = _run(model, requests, range(len(requests)))
        for k in indices:
            outputs[k] = everything[k]
    return outputs


def serve_as_dict(model, adapter_sets, requests):
    return dict(enumerate(serve(model, adapter_sets, requests)))


@pytest.mark.parametrize(
    "answer, words",
    [
        (serve_loading_per_request, ("loaded adapter sets 8 times for 3 tasks",)),
        (serve_every_row_per_task, ("24 rows for 8", "computed once")),
        (serve_as_dict, ("one row of logits per request",)),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_serving_counts_rows_and_loads(answer, words):
    _fails(ct.check_serving, answer, words=words)


def serve_squeezing(model, adapter_sets, requests):
    """Squeezes each group's logits: a group of one request loses its row dimension (right on the fixed requests,
    where every task has two or more)."""
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        load_adapter_set(model, adapter_sets[task])
        for k, row in zip(indices, _run(model, requests, indices).squeeze()):
            outputs[k] = row
    return outputs


def serve_every_task_of_the_sets(model, adapter_sets, requests):
    """Walks the tasks of adapter_sets, not of the requests: a task nobody asked for stacks an empty batch."""
    outputs = [None] * len(requests)
    for task in adapter_sets:
        indices = [k for k, (asked, _) in enumerate(requests) if asked == task]
        load_adapter_set(model, adapter_sets[task])
        for k, row in zip(indices, _run(model, requests, indices)):
            outputs[k] = row
    return outputs


@pytest.mark.parametrize(
    "answer, words",
    [
        (serve_squeezing, ("Right on the fixed case", "1 request of", "squeeze()", "one row of logits per request")),
        (serve_every_task_of_the_sets, ("Right on the fixed case", "1 request of", "a task with no requests",
                                        "stack expects a non-empty TensorList")),
    ],
    ids=lambda value: getattr(value, "__name__", None) if callable(value) else None,
)
def test_serving_draws_request_lists_and_shows_the_shortest_that_fails(answer, words):
    _fails(ct.check_serving, answer, words=words)


def test_serving_accepts_a_server_of_one_forward_pass_per_task_on_drawn_requests(capsys):
    ct.check_serving(serve)
    assert "25 drawn request lists (1 to 10 requests" in capsys.readouterr().out


def test_serving_reports_a_stub_as_missing():
    _fails(ct.check_serving, _stub, words=(MISSING,))


def step_backward_twice(model, optimizer, batch):
    """"Once more to be sure": the second backward adds the same gradients again."""
    loss = model(**batch).loss
    loss.backward(retain_graph=True)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def step_stepping_twice(model, optimizer, batch):
    """Two updates with one gradient."""
    loss = step_without_zero_grad(model, optimizer, batch)  # the backward pass and a first update
    optimizer.step()
    optimizer.zero_grad()
    return loss


def step_doubling_the_loss(model, optimizer, batch):
    """The same gradients as a double backward, made by another mistake: the loss itself is scaled."""
    loss = model(**batch).loss
    (2 * loss).backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def test_a_second_backward_or_step_is_named_as_such_not_as_a_gradient_of_another_loss():
    """Both were told the gradient audit's guess ("a loss multiplied by a number", "not those of this batch's
    loss"); the check counts the backward passes and the updates, so each mistake is named only where it was made."""
    message = _fails(ct.check_training_step, prepare_by_name, step_backward_twice,
                     words=("loss.backward() ran 2 times", "once a step"))
    assert "multiplied" not in message
    message = _fails(ct.check_training_step, prepare_by_name, step_stepping_twice,
                     words=("calls optimizer.step() 2 times",))
    assert "not those of this batch's loss" not in message
    message = _fails(ct.check_training_step, prepare_by_name, step_doubling_the_loss,
                     words=("2 times this batch's loss's", "multiplied by a number"))
    assert "backward() ran" not in message


def step_with_a_deprecated_call(model, optimizer, batch):
    """Right; a library it calls warns (as torch does, once a process, for ``float(loss)`` on a loss that requires
    grad: step_with_own_cross_entropy)."""
    warnings.warn("this call is deprecated and will be removed", FutureWarning)
    return step(model, optimizer, batch)


def test_a_right_answer_that_makes_a_library_warn_passes_with_a_note_and_writes_nothing_to_stderr(capsys, monkeypatch):
    """nbgrader scores a graded cell that wrote to stderr as failed, so a warning that escaped the check would cost a
    right answer its point. The note is shown once a session, as Python shows a warning once per place."""
    monkeypatch.setattr(checks, "_NOTED", set())  # as in a fresh kernel
    with warnings.catch_warnings(record=True) as escaped:
        warnings.simplefilter("always")
        ct.check_training_step(prepare_by_name, step_with_a_deprecated_call)
        ct.check_training_step(prepare_by_name, step_with_a_deprecated_call)
    out = capsys.readouterr().out
    assert [str(w.message) for w in escaped] == []
    assert out.count("✔") == 2
    assert out.count("Note: your code warned while the check ran it (FutureWarning: this call is deprecated") == 1
