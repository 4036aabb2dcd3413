"""The course's one rule for an exercise whose answer the package already has: the answer is the student's own.
Each such check refuses the package's function, given as the answer or called from it (by its module or by a name
imported from it), with a message naming it; the function works again once the check is done, and an answer of
one's own still passes."""

import numpy as np
import pytest
from torch import nn

from adapterlab.model import counting, fold
from adapterlab.model.adapter import BottleneckAdapter
from adapterlab.model.counting import bert_counts, backbone_config
from adapterlab.model.fold import fold_linear_adapter
from adapterlab.runs import tradeoff
from adapterlab.teaching.exercises import checks, checks_anatomy, checks_training
from adapterlab.teaching.exercises.checks import CheckFailed
from adapterlab.teaching.notebook import anatomy
from adapterlab.teaching.notebook.anatomy import effective_rank
from adapterlab.training import data
from adapterlab.training.data import matthews

import test_check_pareto as pareto_answers
import test_checks as answers
import test_checks_anatomy as anatomy_answers
import test_checks_training as training_answers


def _cases():
    """(check, answers that use the package's function, the words the refusal names it by, a right answer)."""
    return [
        (checks.check_fold, [fold_linear_adapter, lambda dense, adapter: fold.fold_linear_adapter(dense, adapter),
                             lambda dense, adapter: _linear(dense, fold.linear_adapter_matrix(adapter))],
         "fold_linear_adapter or linear_adapter_matrix", answers.right_fold),
        (checks.check_trained_count, [lambda *case: counting.bert_counts(backbone_config("bert-base"), case[3], case[2]),
                                      lambda *case: bert_counts(backbone_config("bert-base"), "houlsby", 64)],
         "bert_counts", answers.right_count),
        (checks_training.check_matthews, [lambda labels, predictions: data.matthews(np.ones((2, 2))),
                                          lambda labels, predictions: matthews(np.ones((2, 2)))],
         "the package's matthews", training_answers.matthews),
        (checks_training.check_pareto_front, [tradeoff.pareto_front, lambda points: tradeoff.pareto_front(points)],
         "tradeoff.pareto_front", pareto_answers.solution),
        (checks_anatomy.check_effective_rank, [effective_rank, lambda values, energy=0.9: anatomy.effective_rank(values)],
         "the package's effective_rank", anatomy_answers.my_effective_rank),
    ]


def _linear(dense, matrix):
    return nn.Linear(dense.in_features, dense.out_features)


@pytest.mark.parametrize("check, using, named, right", _cases(), ids=lambda value: getattr(value, "__name__", None))
def test_an_answer_that_is_or_calls_the_package_s_function_is_refused_naming_it(check, using, named, right, capsys):
    for answer in using:
        with pytest.raises(CheckFailed) as refused:
            check(answer)
        assert named in str(refused.value) and "yourself" in str(refused.value), str(refused.value)
    check(right)  # an answer of one's own passes, after the refusals as before
    assert capsys.readouterr().out.startswith("✔")


def test_the_package_s_functions_work_again_after_a_refusal():
    with pytest.raises(CheckFailed):
        checks_anatomy.check_effective_rank(effective_rank)
    assert effective_rank([3.0, 4.0], 0.5) == 1
    with pytest.raises(CheckFailed):
        checks_training.check_matthews(matthews)
    assert matthews(np.array([[5, 0], [0, 5]])) == pytest.approx(1.0)
    assert bert_counts(backbone_config("bert-base"), "houlsby", 64)["total_trainable"] > 0


def test_an_adapter_class_that_is_or_builds_on_the_package_s_is_refused():
    class Mine(BottleneckAdapter):
        def __init__(self, d_model, bottleneck):
            super().__init__(d_model, bottleneck, "gelu")

    for answer in (BottleneckAdapter, Mine):
        with pytest.raises(CheckFailed, match="the package's BottleneckAdapter"):
            checks.check_adapter_class(answer)
