"""No right answer is refused on 200 drawn cases per check.

Each check draws a few dozen cases by default, to stay quick in a notebook; here every check draws 200 (its
constant raised for the test) and the right answers of the package's tests, each written its own way, must pass
all of them (about 30 s in all: right answers are quick to run, none is shrunk)."""

from __future__ import annotations

import pytest

import test_check_pareto as pareto_answers
import test_checks as answers
import test_checks_anatomy as anatomy_answers
import test_checks_training as training_answers
from adapterlab import checks
from adapterlab import checks_training as ct
from adapterlab.teaching.exercises import checks_anatomy

DRAWN = 200

#: (the check, the module and names of its drawn-case counts, the right answers it must accept)
CASES = {
    "adapter_class": (checks.check_adapter_class, checks, ("DRAWN_SHAPES",), [(answers.RightAdapter,)]),
    "adapter_gradients": (checks.check_adapter_gradients, checks, ("DRAWN_ADAPTERS",), [(answers.right_general,)]),
    "zero_up_gradients": (checks.check_zero_up_gradients, checks, ("DRAWN_ADAPTERS",),
                          [(answers.right_gradients,), (answers.right_general,)]),
    "fold": (checks.check_fold, checks, ("DRAWN_FOLDS",), [(answers.right_fold,)]),
    "parallel_fold": (checks.check_parallel_fold, checks, ("DRAWN_FOLDS",), [(answers.right_parallel,)]),
    "trained_count": (checks.check_trained_count, checks, ("DRAWN_COUNT_EXAMPLES",), [(answers.right_count,)]),
    "trained_names": (checks.check_trained_names, checks, ("DRAWN_NAME_MODELS",), [(answers.right_names,)]),
    "effective_rank": (checks_anatomy.check_effective_rank, checks_anatomy, ("DRAWN_EXAMPLES",),
                       [(anatomy_answers.my_effective_rank,)]),
    "training_step": (ct.check_training_step, ct, ("DRAWN_PREPARATIONS",),
                      [(training_answers.prepare_by_name, training_answers.step),
                       (training_answers.prepare_with_policy, training_answers.step_zeroing_first)]),
    "matthews": (ct.check_matthews, ct, ("DRAWN_LABEL_SETS",), [(training_answers.matthews,)]),
    "span_ablation": (ct.check_span_ablation, ct, ("DRAWN_DEPTHS",), [(training_answers.ablate,)]),
    "serving": (ct.check_serving, ct, ("DRAWN_SERVINGS",), [(training_answers.serve,)]),
    "pareto_front": (ct.check_pareto_front, ct, ("DRAWN_FRONTS",), [(pareto_answers.by_brute_force,)]),
}


@pytest.mark.parametrize("check_name", sorted(CASES))
def test_right_answers_pass_200_drawn_cases(check_name, monkeypatch, capsys):
    check, module, counts, right_answers = CASES[check_name]
    for count in counts:
        assert 0 < getattr(module, count) < DRAWN  # the default draws fewer: this test raises it
        monkeypatch.setattr(module, count, DRAWN)
    for answer in right_answers:
        check(*answer)
        out = capsys.readouterr().out
        assert out.splitlines()[-1].startswith("✔") and f"{DRAWN} drawn" in out, out
