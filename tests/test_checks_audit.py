"""Every check audits each call of an answer (adapterlab/teaching/exercises/audit.py): answers that return the right
value but leave torch's global state, a model's mode or flags, or the caller's arguments changed are refused naming
what changed, and torch's state is put back. Each answer below returns what its check compares, so a check that
only read the returned value (as they did) would accept it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from adapterlab import checks
from adapterlab import checks_training as ct
from adapterlab.checkpoints import load_adapter_set
from adapterlab.teaching.exercises import audit
from test_checks import _fails as _refused, right_count, right_names
from test_checks_training import _groups, _run, matthews, serve


# Lab 9: serving, with a model the notebook goes on using -------------------------------------------------------

def serve_with_grad_left_off(model, adapter_sets, requests):
    torch.set_grad_enabled(False)  # "serving needs no gradients", never switched back on
    return serve(model, adapter_sets, requests)


def serve_then_train_mode(model, adapter_sets, requests):
    outputs = serve(model, adapter_sets, requests)
    model.train()  # "ready for the next training cell"
    return outputs


def serve_freezing_everything(model, adapter_sets, requests):
    model.requires_grad_(False)
    return serve(model, adapter_sets, requests)


_MEMORY: dict = {}


def serve_remembering_the_loaded_set(model, adapter_sets, requests):
    """Skips a load when it believes the set is already in the model: right on the first call only."""
    outputs = [None] * len(requests)
    for task, indices in _groups(requests).items():
        if _MEMORY.get("loaded") != task:
            load_adapter_set(model, adapter_sets[task])
            _MEMORY["loaded"] = task
        for k, row in zip(indices, _run(model, requests, indices)):
            outputs[k] = row
    return outputs


@pytest.mark.parametrize("answer, words", [
    (serve_with_grad_left_off, ("left autograd switched off", "with torch.no_grad()")),
    (serve_then_train_mode, ("left `model` in training mode", "model.train()", "dropout is on")),
    (serve_freezing_everything, ("changed which parameters of `model` require grad", "is now frozen")),
    (serve_remembering_the_loaded_set, ("called again", "keeps something from the last call")),
], ids=lambda value: getattr(value, "__name__", None))
def test_a_server_that_leaves_the_notebook_changed_is_refused(answer, words):
    _MEMORY.clear()
    _refused(ct.check_serving, answer, *words)
    assert torch.is_grad_enabled(), "the check did not put autograd back on"


def test_the_grouped_server_is_still_accepted_when_called_again(capsys):
    ct.check_serving(serve)
    assert capsys.readouterr().out.startswith("✔ ")


# Lab 7 and lab 4: the caller's list or array, rewritten in place --------------------------------------------------

def matthews_then_clears_labels(labels, predictions):
    score = matthews(labels, predictions)
    labels[:] = 0  # "done with them"
    return score


def names_appending_to_the_caller_s_list(names, placement, train_layernorm):
    trained = right_names(list(names), placement, train_layernorm)
    names.append("classifier.weight")  # "the head always trains": added to the caller's list
    return trained


def test_an_answer_that_rewrites_the_caller_s_array_or_list_is_refused():
    _refused(ct.check_matthews, matthews_then_clears_labels, "changed `labels` in place", "x.copy()")
    _refused(checks.check_trained_names, names_appending_to_the_caller_s_list, "changed `names` in place",
             "an append")


def test_a_count_that_changes_torch_s_default_dtype_is_refused_and_the_dtype_put_back():
    def counting_in_float64(*args):
        torch.set_default_dtype(torch.float64)  # "for exact sums"
        return right_count(*args)

    _refused(checks.check_trained_count, counting_in_float64, "left torch's default dtype changed from float32")
    assert torch.get_default_dtype() == torch.float32


# The audit on its own -----------------------------------------------------------------------------------------------

def test_the_audit_sees_nested_changes_and_names_the_argument():
    def answer(points, table):
        table["b"][1] = 9.0
        return points

    args = ([1, 2], {"a": np.zeros(2), "b": np.ones(2)})
    before = audit.snapshot(args)
    answer(*args)
    change = audit.first_change(before, answer, args)
    assert change.startswith("changed `table`['b'] in place"), change
    assert audit.first_change(audit.snapshot(args), answer, args) is None  # the same values again: no change


def test_what_an_argument_may_change_is_not_reported():
    model = torch.nn.Linear(2, 2)

    def step(model):
        with torch.no_grad():
            model.weight.add_(1.0)

    before = audit.snapshot((model,))
    step(model)
    assert "changed the weights of `model`" in audit.first_change(before, step, (model,))
    before = audit.snapshot((model,))
    step(model)
    assert audit.first_change(before, step, (model,), may_change={0: audit.WEIGHTS}) is None


def test_nan_values_left_as_they_were_are_no_change():
    values = np.array([1.0, np.nan])
    tensor = torch.tensor([np.nan, 2.0])
    before = audit.snapshot((values, tensor))
    assert audit.first_change(before, lambda a, b: None, (values, tensor)) is None
