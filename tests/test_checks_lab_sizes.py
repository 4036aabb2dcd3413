"""Every self-check runs the student's code at the sizes and shapes its lab uses, not only at toy ones.

Each right answer is wrapped so that it records what the check hands it; the check must pass, and what
it handed over must include the lab's own case: BERT-base's d = 768 with r = 64 and its 12 layers,
(tokens, d) and (batch, sequence, d) inputs, CoLA's 1,043 and 8,551 rows, a padded batch with dropout
on, and a Pareto front with ties, twins and scores of 0 or below.
"""

from __future__ import annotations

import numpy as np
import torch

import test_check_pareto as pareto_answers
import test_checks as answers
import test_checks_training as training_answers
from adapterlab import checks
from adapterlab import checks_training as ct
from adapterlab.placement import encoder_layers


def test_the_adapter_check_builds_bert_base_s_adapter_and_feeds_it_both_input_shapes(capsys):
    built, shapes = [], set()

    class Recording(answers.RightAdapter):
        def __init__(self, d_model, bottleneck):
            super().__init__(d_model, bottleneck)
            built.append((d_model, bottleneck))

        def forward(self, h):
            shapes.add((h.ndim, h.shape[-1]))
            return super().forward(h)

    checks.check_adapter_class(Recording)
    assert capsys.readouterr().out.startswith("✔")
    assert (768, 64) in built and any(d != 768 for d, _ in built)
    assert {(2, 768), (3, 768)} <= shapes


def test_the_gradient_checks_include_d_768_r_64(capsys):
    for check in (checks.check_adapter_gradients, checks.check_zero_up_gradients):
        seen = []

        def recording(adapter, h, delta):
            seen.append((adapter.d_model, adapter.bottleneck, h.shape[0]))
            return answers.right_general(adapter, h, delta)

        check(recording)
        assert any(d == 768 and r == 64 and tokens > 1 for d, r, tokens in seen), seen
    assert capsys.readouterr().out.count("✔") == 2


def test_the_fold_checks_use_bert_base_s_projections(capsys):
    serial, parallel = [], []

    def fold(dense, adapter):
        serial.append((dense.in_features, dense.out_features, adapter.bottleneck))
        return answers.right_fold(dense, adapter)

    def fold_parallel(projection, adapter, scale):
        parallel.append((projection.in_features, adapter.bottleneck))
        return answers.right_parallel(projection, adapter, scale)

    checks.check_fold(fold)
    checks.check_parallel_fold(fold_parallel)
    assert capsys.readouterr().out.count("✔") == 2
    assert {(768, 768, 64), (3072, 768, 64)} <= set(serial)
    assert (768, 64) in parallel


def test_the_count_check_counts_bert_base_and_bert_large(capsys):
    seen = []

    def count(*args):
        seen.append(args[:4])
        return answers.right_count(*args)

    checks.check_trained_count(count)
    assert capsys.readouterr().out.startswith("✔")
    assert (768, 12, 64, "houlsby") in seen and (1024, 24, 64, "pfeiffer") in seen


def test_the_names_check_hands_over_bert_base_s_twelve_layers(capsys):
    depths = set()

    def names_fn(names, placement, train_layernorm):
        depths.add(len({n.split(".")[3] for n in names if n.startswith("bert.encoder.layer.")}))
        return answers.right_names(names, placement, train_layernorm)

    checks.check_trained_names(names_fn)
    assert capsys.readouterr().out.startswith("✔")
    assert 12 in depths


def test_the_training_check_trains_with_padding_and_dropout_and_freezes_twelve_layers(capsys):
    depths, batches, modes = set(), [], []

    def prepare(model, learning_rate):
        depths.add(len(encoder_layers(model)))
        return training_answers.prepare_by_name(model, learning_rate)

    def step(model, optimizer, batch):
        batches.append(batch)
        modes.append((model.training, model.config.hidden_dropout_prob))
        return training_answers.step(model, optimizer, batch)

    ct.check_training_step(prepare, step)
    assert capsys.readouterr().out.startswith("✔")
    assert 12 in depths
    assert all((b["attention_mask"] == 0).any() for b in batches)  # padded rows: the mask matters
    assert all(training and dropout > 0 for training, dropout in modes)


def test_the_matthews_check_scores_cola_s_sizes_as_int32(capsys):
    seen = []

    def matthews(labels, predictions):
        seen.append((len(labels), np.asarray(labels).dtype))
        return training_answers.matthews(labels, predictions)

    ct.check_matthews(matthews)
    assert capsys.readouterr().out.startswith("✔")
    assert (1043, np.dtype(np.int32)) in seen and (8551, np.dtype(np.int32)) in seen


def test_the_ablation_check_walks_every_span_of_twelve_layers_and_of_another_depth(capsys):
    """BERT-base's 12 layers, and another depth, so that a loop written for 12 layers cannot pass."""
    depths = []

    def ablate(model, score):
        depths.append(len(encoder_layers(model)))
        return training_answers.ablate(model, score)

    ct.check_span_ablation(ablate)
    assert capsys.readouterr().out.startswith("✔")
    assert 12 in depths and len(set(depths)) > 1


def test_the_serving_check_mixes_tasks_and_interleaves_them(capsys):
    seen = []

    def serve(model, adapter_sets, requests):
        seen.append([task for task, _ in requests])
        return training_answers.serve(model, adapter_sets, requests)

    ct.check_serving(serve)
    assert capsys.readouterr().out.startswith("✔")
    tasks, again = seen[:2]  # called a second time, to see that nothing is kept between calls (then on drawn lists)
    assert len(set(tasks)) == 3 and any(a != b for a, b in zip(tasks, tasks[1:]))
    assert sorted(again) == sorted(tasks)


def test_the_pareto_check_has_ties_twins_and_scores_at_or_below_zero(capsys):
    seen = []

    def front(points):
        seen.append(dict(points))
        return pareto_answers.by_brute_force(points)

    ct.check_pareto_front(front)
    assert capsys.readouterr().out.startswith("✔")
    assert any(len(points) >= 10 for points in seen)
    assert any(len(set(points.values())) < len(points) for points in seen)  # exact twins
    assert any(len({count for count, _ in points.values()}) < len(points) for points in seen)  # equal counts
    assert any(min(score for _, score in points.values()) <= 0 for points in seen)


def test_a_failing_check_shows_one_line_in_jupyter():
    try:
        checks.check_fold(lambda dense, adapter: dense)
    except checks.CheckFailed as error:
        [line] = error._render_traceback_()
        assert line.startswith("✘ ") and "\n" not in line
    else:  # pragma: no cover - the answer returns the unchanged layer
        raise AssertionError("returning dense itself must fail")


def test_a_check_gives_the_thread_count_back():
    threads = torch.get_num_threads()
    checks.check_trained_count(answers.right_count)
    assert torch.get_num_threads() == threads
