"""The widgets, driven headless: moving a control must redraw the figure and the table with the
numbers the package computes for the new value."""

from __future__ import annotations

import pytest

from adapterlab import counting, probes, widgets


def _plotly_json(panel):
    (output,) = panel.plot.outputs
    return output["data"]["application/vnd.plotly.v1+json"]


@pytest.fixture(scope="module")
def inputs():
    return probes.probe_inputs(n_tokens=8, d_model=48, seed=3)


def test_init_scale_explorer_redraws_on_slider_move(inputs):
    h, delta = inputs
    panel = widgets.init_scale_explorer(h, delta, bottleneck=4, initial=1e-2)
    marker_before = panel.figure.data[-1].y
    table_before = panel.table.value
    panel.controls["scale"].value = 1e-4
    assert panel.table.value != table_before
    assert panel.figure.data[-1].x[0] == pytest.approx(1e-4)
    # the marker sits on the probe the package computes for the new σ, not on the old one
    expected = probes.init_scale_probe(1e-4, h, delta, 4)
    assert panel.figure.data[-1].y[0] == pytest.approx(expected["deviation"])
    assert panel.figure.data[-1].y[0] != pytest.approx(marker_before[0])
    assert f"{expected['deviation']:.2e}" in panel.table.value
    # what the Output shows is the current figure, as plotly JSON
    assert _plotly_json(panel)["data"][-1]["name"] == "σ = 1.0e-04"


def test_init_scale_explorer_curves_follow_the_sigma_laws(inputs):
    h, delta = inputs
    panel = widgets.init_scale_explorer(h, delta, bottleneck=4)
    scales = panel.figure.data[0].x
    deviation, grad_up = panel.figure.data[0].y, panel.figure.data[2].y
    # a decade of σ: deviation ×100 (σ²), gradient ×10 (σ), far below the nonlinear regime
    i, j = scales.index(1e-6), scales.index(1e-5)
    assert deviation[j] / deviation[i] == pytest.approx(100, rel=0.05)
    assert grad_up[j] / grad_up[i] == pytest.approx(10, rel=0.05)


def test_counts_explorer_redraws_on_slider_and_dropdown():
    panel = widgets.counts_explorer("bert-base", "houlsby", 64)
    assert "2,379,264" in panel.table.value  # 24 adapters of 99,136 (closed form and counted)
    table_before = panel.table.value
    panel.controls["bottleneck"].value = 48
    assert panel.table.value != table_before
    marker = panel.figure.data[-1]
    expected = counting.bert_counts(counting.backbone_config("bert-base"), "houlsby", 48)["total_trainable"]
    assert marker.x[0] == 48 and marker.y[0] == pytest.approx(expected / 1e6)
    panel.controls["placement"].value = "pfeiffer"
    assert "894,528" in panel.table.value  # 12 adapters of 74,544
    assert panel.figure.data[-1].name == "your choice: pfeiffer, r = 48"
    assert "NO" not in panel.table.value


def test_counts_explorer_bert_large_and_frozen_layernorms():
    panel = widgets.counts_explorer("bert-large", "houlsby", 64)
    assert "6,343,680" in panel.table.value and "132,160" in panel.table.value
    with_norms = panel.figure.data[-1].y[0]
    panel.controls["train_layernorm"].value = False
    # 49 LayerNorms of 2·1024 parameters drop out of the trainable total
    assert (with_norms - panel.figure.data[-1].y[0]) * 1e6 == pytest.approx(49 * 2 * 1024)
    assert "frozen" in panel.table.value


def test_html_table_escapes():
    assert "&lt;b&gt;" in widgets.html_table(["x"], [["<b>"]])


def test_an_explorer_says_how_to_get_it_back_where_it_cannot_be_drawn():
    """JupyterLab shows the plain-text part of a widget's output where the widget cannot be drawn (a reloaded
    page): it must say what to do, not show Python's VBox(children=...)."""
    text = widgets.counts_explorer()._repr_mimebundle_()["text/plain"]
    assert "VBox(" not in text and "run this cell again" in text
