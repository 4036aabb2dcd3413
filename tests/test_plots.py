"""Figure layout facts a reader depends on: marks at the right σ, legends clear of the axis titles."""

import math

import pytest

from adapterlab import plots
from adapterlab.adapter import ORIGINAL_CODE_INIT_SCALE, PAPER_INIT_SCALE
from adapterlab.training import History

SCALES = [10.0 ** -k for k in range(7, -1, -1)]


def _init_scale_figures():
    one_adapter = {key: SCALES for key in ("init_scale", "deviation", "predicted", "grad_up", "grad_down")}
    whole_model = {"init_scale": SCALES, "hidden_deviation": SCALES, "max_logit_change": SCALES}
    rows = [{"init_scale": s, "value": 0.1, "metric": "matthews", "trained": 10} for s in SCALES]
    return {
        "init_scale_figure": plots.init_scale_figure(one_adapter),
        "model_deviation_figure": plots.model_deviation_figure(whole_model, "tiny"),
        "sweep_figure": plots.sweep_figure(rows, "init_scale", "CoLA vs init scale"),
    }


@pytest.mark.parametrize("name", ["init_scale_figure", "model_deviation_figure", "sweep_figure"])
def test_init_scale_labels_sit_on_their_lines(name):
    """On a log x axis a shape's x is the value and an annotation's x is its log10: each label must be
    at the decade of its dashed line, and both the paper's and the original code's σ are marked."""
    fig = _init_scale_figures()[name]
    assert fig.layout.xaxis.type == "log"
    lines = sorted(shape.x0 for shape in fig.layout.shapes if shape.x0 == shape.x1)
    assert lines == sorted([ORIGINAL_CODE_INIT_SCALE, PAPER_INIT_SCALE])
    labels = {a.text: a.x for a in fig.layout.annotations if a.yref == "paper" and "e-" in a.text}
    assert labels["1e-2: paper"] == pytest.approx(math.log10(PAPER_INIT_SCALE))
    assert labels["1e-3: original code"] == pytest.approx(math.log10(ORIGINAL_CODE_INIT_SCALE))


def test_training_history_legend_is_below_the_axis_titles():
    """The legend is horizontal and hangs below the plot area (paper y < 0, anchored at its top), so
    it cannot cover the x-axis titles, which sit just under the axes."""
    history = History(metric="accuracy", steps=[1, 2], loss=[0.7, 0.6], evals=[{"step": 2, "loss": 0.6, "accuracy": 0.5}])
    legend = plots.training_figure(history).layout.legend
    assert legend.orientation == "h"
    assert legend.yanchor == "top" and legend.y < -0.2
