"""Lab 11's measurements of trained adapters, against independent computations: the relative change and the
adapters' inputs recomputed by hand from each sublayer's dense layer, the linear share against closed forms and
NumPy's least squares, the linearised and folded models against each other and against the fit, effective ranks
of spectra known in closed form, and Spearman's ρ against its textbook formula."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from scipy import stats

from adapterlab.model.adapter import BottleneckAdapter
from adapterlab.model.placement import (
    AdaptedOutput,
    PlacementError,
    add_adapters,
    adapted_outputs,
    adapter_config,
    set_adapters_enabled,
)
from adapterlab.runs.ablation import SpanAblation
from adapterlab.teaching import anatomy

#: A BERT narrower than conftest's (d = 16), so that a linear fit needs only 170 tokens (ten per unknown).
D, R = 16, 8
NARROW = {"hidden_size": D, "num_attention_heads": 4, "intermediate_size": 32}
#: 216 real tokens: enough for the fit.
N_BATCHES, BATCH, LENGTH = 2, 4, 36


def sentences(seed: int = 0, n_batches: int = N_BATCHES) -> list[dict]:
    """Random token batches, each with its last two rows padded after half their length."""
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(n_batches):
        ids = torch.randint(1, 100, (BATCH, LENGTH), generator=generator)
        mask = torch.ones_like(ids)
        mask[-2:, LENGTH // 2:] = 0
        ids[-2:, LENGTH // 2:] = 0
        batches.append({"input_ids": ids, "attention_mask": mask, "labels": torch.zeros(BATCH, dtype=torch.long)})
    return batches


def adapted(make_classifier, **settings):
    return add_adapters(make_classifier(**NARROW), "houlsby", R, **settings)


def logits(model, batches):
    with torch.no_grad():
        return torch.cat([model(**{k: v for k, v in b.items() if k != "labels"}).logits for b in batches])


def inputs_by_hand(model, batches) -> dict:
    """Each adapter's input recomputed from its sublayer: dropout(dense(x)) is dense(x) in eval mode, kept on the
    real tokens."""
    found = {}
    hooks = []
    for index, position, output in adapted_outputs(model):
        def keep(module, args, key=(index, position)):
            found.setdefault(key, []).append((module.dense(args[0]), current["mask"]))
        hooks.append(output.register_forward_pre_hook(keep))
    current = {}
    with torch.no_grad():
        for batch in batches:
            current["mask"] = batch["attention_mask"].bool()
            model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    for hook in hooks:
        hook.remove()
    return {key: torch.cat([h[mask] for h, mask in parts]) for key, parts in found.items()}


def bending(make_classifier, **settings):
    """A model whose adapters use their nonlinearity and biases: each one's pre-activations centred at 0 with unit
    spread on a batch of sentences (a random tiny BERT's states vary so little from token to token that GELU is
    nearly linear there), and a random up-projection bias."""
    model = adapted(make_classifier, init_scale=0.3, **settings)
    for index, position, output in adapted_outputs(model):  # in order: each one moves the next one's inputs
        down = output.adapter.down
        with torch.no_grad():
            z = down(inputs_by_hand(model, sentences(n_batches=1))[index, position])
            down.weight.div_(z.std(dim=0)[:, None])
            down.bias.sub_(z.mean(dim=0)).div_(z.std(dim=0))
            output.adapter.up.bias.normal_(0, 0.1)  # trained biases are not zero
    return model


def test_relative_change_recomputed_by_hand_on_real_tokens_only(make_classifier):
    model = adapted(make_classifier, init_scale=0.3)
    batches = sentences()
    inputs = anatomy.adapter_inputs(model, batches)
    by_hand = inputs_by_hand(model, batches)
    real_tokens = sum(int(b["attention_mask"].sum()) for b in batches)
    table = anatomy.relative_changes(model, inputs)
    assert table.shape == (3, 2)
    for index, position, output in adapted_outputs(model):
        h = by_hand[index, position].double()
        assert h.shape == (real_tokens, D)
        torch.testing.assert_close(inputs[index, position].double(), h, rtol=1e-6, atol=1e-6)
        a = output.adapter
        z = torch.nn.functional.gelu(h @ a.down.weight.double().T + a.down.bias.double())
        change = z @ a.up.weight.double().T + a.up.bias.double()
        expected = (torch.linalg.norm(change) / torch.linalg.norm(h)).item()
        assert table[index, anatomy.POSITIONS.index(position)] == pytest.approx(expected, rel=1e-6)
    assert (table > 0.05).all()


def residual_streams_by_hand(model, batches) -> dict:
    """The hidden state each adapter's correction is added to, recomputed from the model's own outputs: the
    layer's input (``output_hidden_states``) for the adapter after attention, and the input of the layer's
    intermediate (the attention block's output) for the one after the FFN; on the real tokens."""
    layers = model.bert.encoder.layer
    attention_outputs = {index: [] for index in range(len(layers))}
    hooks = [layer.intermediate.register_forward_pre_hook(
        lambda module, args, index=index: attention_outputs[index].append(args[0])) for index, layer in
        enumerate(layers)]
    states = {key: [] for key in ((i, p) for i in range(len(layers)) for p in anatomy.POSITIONS)}
    with torch.no_grad():
        for batch in batches:
            mask = batch["attention_mask"].bool()
            hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           output_hidden_states=True).hidden_states
            for index in range(len(layers)):
                states[index, "attention"].append(hidden[index][mask])
                states[index, "ffn"].append(attention_outputs[index][-1][mask])
    for hook in hooks:
        hook.remove()
    return {key: torch.cat(parts) for key, parts in states.items()}


def test_residual_change_is_the_correction_against_the_hidden_state_recomputed_by_hand(make_classifier):
    model = bending(make_classifier)
    batches = sentences()
    inputs, residuals = anatomy.inputs_and_residuals(model, batches)
    by_hand, streams = inputs_by_hand(model, batches), residual_streams_by_hand(model, batches)
    table = anatomy.residual_changes(model, inputs, residuals)
    changes = anatomy.relative_changes(model, inputs)
    for index, position, output in adapted_outputs(model):
        torch.testing.assert_close(inputs[index, position], anatomy.adapter_inputs(model, batches)[index, position])
        h, x = by_hand[index, position].double(), streams[index, position].double()
        torch.testing.assert_close(residuals[index, position].double(), x, rtol=1e-6, atol=1e-6)
        a = output.adapter
        z = torch.nn.functional.gelu(h @ a.down.weight.double().T + a.down.bias.double())
        correction = z @ a.up.weight.double().T + a.up.bias.double()
        column = anatomy.POSITIONS.index(position)
        assert table[index, column] == pytest.approx((correction.norm() / x.norm()).item(), rel=1e-6)
        # the two measures differ exactly by how large h is against x
        assert table[index, column] / changes[index, column] == pytest.approx((h.norm() / x.norm()).item(), rel=1e-6)
    assert not np.allclose(table, changes, rtol=0.05)  # h and x differ in size here: the measures are not one


def test_a_parallel_adapter_reads_the_residual_stream_and_is_scaled_as_it_is_added(make_classifier):
    model = add_adapters(make_classifier(**NARROW), "parallel", R, init_scale=0.3, parallel_scale=4.0)
    inputs, residuals = anatomy.inputs_and_residuals(model, sentences())
    for key in inputs:
        assert torch.equal(inputs[key], residuals[key])  # a parallel adapter reads x itself
    np.testing.assert_allclose(anatomy.residual_changes(model, inputs, residuals),
                               4.0 * anatomy.relative_changes(model, inputs), rtol=1e-9)


def test_residual_changes_refuse_streams_of_another_pass(make_classifier):
    model = adapted(make_classifier, init_scale=0.3)
    inputs, _ = anatomy.inputs_and_residuals(model, sentences())
    _, other = anatomy.inputs_and_residuals(model, sentences(n_batches=1))
    with pytest.raises(ValueError, match="in one pass"):
        anatomy.residual_changes(model, inputs, other)


def test_a_zero_up_adapter_changes_nothing(make_classifier):
    model = adapted(make_classifier, init="zero_up")
    table = anatomy.relative_changes(model, anatomy.adapter_inputs(model, sentences()))
    assert np.array_equal(table, np.zeros((3, 2)))


def test_a_layer_without_adapters_is_nan_and_the_model_is_left_alone(make_classifier):
    model = adapted(make_classifier, layers=[0, 2], init_scale=0.3)
    before = logits(model, sentences(1))
    table = anatomy.relative_changes(model, anatomy.adapter_inputs(model, sentences()))
    assert np.isnan(table[1]).all() and np.isfinite(table[[0, 2]]).all()
    assert torch.equal(logits(model, sentences(1)), before)
    assert not any(output._forward_pre_hooks or output.adapter.down._forward_pre_hooks
                   for _, _, output in adapted_outputs(model))


def test_errors_say_what_to_do(make_classifier):
    with pytest.raises(PlacementError, match="no adapters"):
        anatomy.adapter_inputs(make_classifier(), sentences())
    model = adapted(make_classifier)
    with pytest.raises(ValueError, match="eval mode"):
        anatomy.adapter_inputs(model.train(), sentences())
    model.eval()
    set_adapters_enabled(model, False, layers=[1])
    with pytest.raises(ValueError, match=r"set_adapters_enabled\(model, True\)"):
        anatomy.adapter_inputs(model, sentences())
    set_adapters_enabled(model, True)
    other = adapted(make_classifier, layers=[0])
    with pytest.raises(ValueError, match="adapter_inputs on this model"):
        anatomy.relative_changes(model, anatomy.adapter_inputs(other, sentences()))
    with pytest.raises(ValueError, match="read 108 real tokens.*at least 170.*pass more sentences"):
        anatomy.linear_shares(model, anatomy.adapter_inputs(model, sentences(n_batches=1)))


def single_adapter(activation: str, d: int = 4, r: int = 1) -> BottleneckAdapter:
    """delta(h) = e_1 · f(h_1): the first coordinate through f and back."""
    adapter = BottleneckAdapter(d, r, activation, init="zero_up")
    with torch.no_grad():
        adapter.down.weight.zero_()
        adapter.down.weight[0, 0] = 1.0
        adapter.up.weight.zero_()
        adapter.up.weight[0, 0] = 1.0
    return adapter


def test_linear_share_of_relu_on_a_standard_normal_is_a_half_plus_one_over_pi():
    """relu(x) = x/2 + 1/√(2π) + residual for x ~ N(0, 1): E relu² = 1/2, residual variance 1/4 − 1/(2π), so an
    affine map explains 1 − (1/4 − 1/(2π)) / (1/2) = 1/2 + 1/π of its energy."""
    h = torch.randn(40_000, 4, generator=torch.Generator().manual_seed(0))
    assert anatomy.linear_share(single_adapter("relu"), h) == pytest.approx(0.5 + 1 / math.pi, abs=0.01)


def test_linear_share_is_one_for_a_linear_map():
    h = torch.randn(400, 4, generator=torch.Generator().manual_seed(0))
    assert anatomy.linear_share(single_adapter("identity"), h) == pytest.approx(1.0, abs=1e-12)
    positive = single_adapter("relu")
    with torch.no_grad():
        positive.down.bias.fill_(10.0)  # every pre-activation above 0: ReLU is the identity there
    assert anatomy.linear_share(positive, h) == pytest.approx(1.0, abs=1e-12)
    assert anatomy.linear_share(single_adapter("relu"), h) < 0.9


def numpy_fit(adapter: BottleneckAdapter, h: torch.Tensor):
    """The least-squares affine fit of the adapter's correction by NumPy: (design, solution, correction)."""
    x = h.double().numpy()
    with torch.no_grad():
        correction = adapter.double().delta(h.double()).numpy()
        adapter.float()
    design = np.hstack([x, np.ones((len(x), 1))])
    return design, np.linalg.lstsq(design, correction, rcond=None)[0], correction


@pytest.mark.parametrize("activation", ["gelu", "identity"])
def test_linear_shares_match_numpys_least_squares(make_classifier, activation):
    model = bending(make_classifier, activation=activation)
    inputs = anatomy.adapter_inputs(model, sentences())
    table = anatomy.linear_shares(model, inputs)
    for index, position, output in adapted_outputs(model):
        design, solution, correction = numpy_fit(output.adapter, inputs[index, position])
        explained = np.linalg.norm(design @ solution) ** 2 / np.linalg.norm(correction) ** 2
        assert table[index, anatomy.POSITIONS.index(position)] == pytest.approx(explained, abs=1e-9)
    if activation == "identity":
        np.testing.assert_allclose(table, 1.0, atol=1e-9)
    else:  # the FFN adapters bend; a random BERT's attention outputs sit in a few clusters an affine map fits
        assert (table[:, 1] < 0.97).all() and (table > 0.5).all()


def test_each_linearised_adapter_is_the_affine_fit_of_its_inputs(make_classifier):
    model = bending(make_classifier)
    inputs = anatomy.adapter_inputs(model, sentences())
    linear = anatomy.linearised_copy(model, inputs)
    assert adapter_config(linear).activation == "identity"
    assert adapter_config(model).activation == "gelu"
    for (index, position, output), (_, _, fitted) in zip(adapted_outputs(model), adapted_outputs(linear)):
        h = inputs[index, position]
        design, solution, _ = numpy_fit(output.adapter, h)
        assert fitted.adapter.is_linear and fitted.adapter.bottleneck == R
        with torch.no_grad():
            got = copy.deepcopy(fitted.adapter).double()(h.double()).numpy()
        np.testing.assert_allclose(got, h.double().numpy() + design @ solution, atol=1e-5)


def test_the_folded_model_computes_what_the_linear_adapters_do(make_classifier):
    model = bending(make_classifier)
    before = logits(model, sentences(1))
    inputs = anatomy.adapter_inputs(model, sentences())
    linear = anatomy.linearised_copy(model, inputs)
    folded = anatomy.linearise_and_fold(model, inputs)
    fresh = sentences(seed=7)
    assert (logits(folded, fresh) - logits(linear, fresh)).abs().max().item() < 1e-5
    assert (logits(linear, fresh) - logits(model, fresh)).abs().max().item() > 1e-3  # the gelu was used
    assert adapter_config(folded) is None
    assert folded.state_dict().keys() == make_classifier(**NARROW).state_dict().keys()
    assert not any(isinstance(m, (AdaptedOutput, BottleneckAdapter)) for m in folded.modules())
    assert torch.equal(logits(model, sentences(1)), before)  # the model itself is untouched


@pytest.mark.parametrize("settings", [{"activation": "identity", "init_scale": 1.5}, {"init": "zero_up"}])
def test_linearising_a_linear_adapter_changes_nothing(make_classifier, settings):
    model = adapted(make_classifier, **settings)
    folded = anatomy.linearise_and_fold(model, anatomy.adapter_inputs(model, sentences()))
    assert (logits(folded, sentences(3)) - logits(model, sentences(3))).abs().max().item() < 1e-5


def test_a_pfeiffer_model_linearises_but_does_not_fold(make_classifier):
    model = add_adapters(make_classifier(**NARROW), "pfeiffer", R, init_scale=1.5)
    inputs = anatomy.adapter_inputs(model, sentences())
    assert adapter_config(anatomy.linearised_copy(model, inputs)).placement == "pfeiffer"
    with pytest.raises(ValueError, match="Pfeiffer"):
        anatomy.linearise_and_fold(model, inputs)


@pytest.mark.parametrize("values, energy, rank", [
    ([3, 2, 1, 0, 0], 0.9, 2),   # energies 9, 4, 1 of 14: 9/14 = 0.64, 13/14 = 0.93
    ([3, 2, 1, 0, 0], 0.6, 1),
    ([3, 2, 1, 0, 0], 0.95, 3),
    ([1, 3, 2], 0.9, 2),         # order does not matter
    ([2, 2, 2, 2, 0, 0], 0.9, 4),  # rank k with equal values: k (for k < 10 at 90 %)
    ([0, 0, 0], 0.9, 0),
])
def test_effective_rank_closed_forms(values, energy, rank):
    assert anatomy.effective_rank(values, energy) == rank


def test_effective_rank_refuses_a_share_outside_0_1():
    for energy in (0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"energy must be a share in \(0, 1\]"):
            anatomy.effective_rank([1, 2], energy)


def orthonormal(rows: int, columns: int, seed: int) -> torch.Tensor:
    return torch.linalg.qr(torch.randn(rows, columns, generator=torch.Generator().manual_seed(seed)))[0]


def rank_two_adapter(activation: str = "identity") -> BottleneckAdapter:
    """W_up W_down = U diag(3, 2, 1, 0, …) Vᵀ with orthonormal U, V: singular values 3, 2, 1 and r − 3 zeros."""
    adapter = BottleneckAdapter(D, R, activation)
    scales = torch.tensor([3.0, 2.0, 1.0] + [0.0] * (R - 3))
    with torch.no_grad():
        adapter.up.weight.copy_(orthonormal(D, R, 1) * scales)
        adapter.down.weight.copy_(orthonormal(D, R, 2).T)
    return adapter


def test_weight_spectrum_of_a_known_product():
    spectrum = anatomy.weight_spectrum(rank_two_adapter())
    np.testing.assert_allclose(spectrum, [3, 2, 1] + [0] * (R - 3), atol=1e-6)
    assert anatomy.effective_rank(spectrum) == 2


def test_bottleneck_spectrum_is_the_square_root_of_the_activation_covariance():
    """For z = W_down h + b with h ~ N(0, I), cov(z) = W_down W_downᵀ: scale the rows of an orthonormal W_down by
    3, 2, 1, 0, … and the spectrum is 3, 2, 1, 0, … (the bias only moves the mean, which is taken out)."""
    adapter = BottleneckAdapter(D, R, "identity")
    with torch.no_grad():
        adapter.down.weight.copy_(orthonormal(D, R, 3).T * torch.tensor([3.0, 2.0, 1.0] + [0.0] * (R - 3))[:, None])
        adapter.down.bias.fill_(5.0)
    h = torch.randn(50_000, D, generator=torch.Generator().manual_seed(4))
    spectrum = anatomy.bottleneck_spectrum(adapter, h)
    np.testing.assert_allclose(spectrum, [3, 2, 1] + [0] * (R - 3), atol=0.03)
    assert anatomy.effective_rank(spectrum) == 2


def test_effective_rank_tables(make_classifier):
    model, batches = adapted(make_classifier, layers=[0, 2], init_scale=0.3), sentences()
    known = rank_two_adapter()
    with torch.no_grad():
        target = adapted_outputs(model)[3][2].adapter  # layer 2, ffn
        target.up.weight.copy_(known.up.weight)
        target.down.weight.copy_(known.down.weight)
    weights = anatomy.effective_ranks(model, anatomy.weight_spectra(model))
    spectra = anatomy.bottleneck_spectra(model, anatomy.adapter_inputs(model, batches))
    bottleneck = anatomy.effective_ranks(model, spectra)
    assert weights[2, 1] == 2 and np.isnan(weights[1]).all() and np.isnan(bottleneck[1]).all()
    by_hand = inputs_by_hand(model, batches)

    def ninety_percent(matrix):
        squares = np.linalg.svd(matrix, compute_uv=False) ** 2
        return int(np.argmax(np.cumsum(squares) >= 0.9 * squares.sum())) + 1

    for index, position, output in adapted_outputs(model):
        a = output.adapter
        column = anatomy.POSITIONS.index(position)
        assert weights[index, column] == ninety_percent((a.up.weight @ a.down.weight).detach().double().numpy())
        h = by_hand[index, position].double()
        z = torch.nn.functional.gelu(h @ a.down.weight.double().T + a.down.bias.double())
        assert bottleneck[index, column] == ninety_percent((z - z.mean(dim=0)).detach().numpy())


def test_rank_correlation_is_spearmans_textbook_rho_with_its_t_test():
    a, b = [0.1, 0.5, 0.2, 0.9, 0.4, 0.7], [3.0, 1.0, 2.0, 6.0, 4.0, 5.0]
    n = len(a)
    d = stats.rankdata(a) - stats.rankdata(b)
    rho = 1 - 6 * (d**2).sum() / (n * (n**2 - 1))
    t = rho * math.sqrt((n - 2) / (1 - rho**2))
    result = anatomy.rank_correlation(a, b)
    assert result.rho == pytest.approx(rho, abs=1e-12)
    assert result.p_value == pytest.approx(2 * stats.t.sf(abs(t), n - 2), rel=1e-9)
    assert result.layers == n
    assert anatomy.rank_correlation([1, 2, 3, 4], [10, 20, 30, 40]).rho == pytest.approx(1.0)
    assert anatomy.rank_correlation([1, 2, 3, 4], [4, 3, 2, 1]).rho == pytest.approx(-1.0)


@pytest.mark.parametrize("a, b, message", [
    ([1, 2, 3], [1, 2], "same length"),
    ([1, 2], [2, 1], "at least 3 layers"),
    ([1, 2, float("nan")], [1, 2, 3], "finite"),
    ([1, 1, 1], [1, 2, 3], "same for every layer"),
])
def test_rank_correlation_refuses_what_it_cannot_rank(a, b, message):
    with pytest.raises(ValueError, match=message):
        anatomy.rank_correlation(a, b)


def test_ablation_importance_is_the_drop_when_one_layer_is_switched_off():
    scores = np.full((3, 3), np.nan)
    scores[np.triu_indices(3)] = [0.90, 0.80, 0.50, 0.70, 0.60, 0.85]
    importance = anatomy.ablation_importance(SpanAblation(scores, full=0.92, metric="accuracy"))
    np.testing.assert_allclose(importance, [0.92 - 0.90, 0.92 - 0.70, 0.92 - 0.85])
