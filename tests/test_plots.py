"""Figure layout facts a reader depends on: marks at the right σ, legends clear of the axis titles."""

import math
import statistics
from types import SimpleNamespace

import pytest

from adapterlab import plots
from adapterlab.adapter import ORIGINAL_CODE_INIT_SCALE, PAPER_INIT_SCALE
from adapterlab.experiments import PAPER, REFERENCE_CONFIG, SeedRow
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
        "seeds_figure": plots.seeds_figure([seed_row(s, [0.1, 0.2]) for s in SCALES], "init_scale", "CoLA vs σ"),
    }


def seed_row(label, values, missing=(), diverged=0, metric="matthews"):
    """A row as adapterlab.experiments.seed_rows makes it, from hand-picked values."""
    return SeedRow(label=label, config=REFERENCE_CONFIG, metric=metric, values=tuple(values),
                   seeds=tuple(range(len(values) + diverged)), missing=tuple(missing), diverged=diverged,
                   mean=statistics.mean(values) if values else math.nan,
                   std=statistics.stdev(values) if len(values) > 1 else math.nan)


@pytest.mark.parametrize("name", ["init_scale_figure", "model_deviation_figure", "sweep_figure", "seeds_figure"])
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


def _traces(fig, suffix=""):
    return [trace for trace in fig.data if trace.name.endswith(suffix)]


def test_seeds_figure_draws_mean_and_sample_std_and_every_seed():
    values = {1e-6: [0.10, 0.14, 0.09], 1e-2: [0.15, 0.05], 1.0: [0.0, 0.0, 0.0]}
    rows = [seed_row(label, v) for label, v in values.items()]
    fig = plots.seeds_figure(rows, "init_scale", "CoLA vs σ", baseline=("majority class", 0.0))
    (means,), (seeds,) = [t for t in fig.data if "each seed" not in t.name], _traces(fig, "each seed")
    assert list(means.x) == list(values)
    assert list(means.y) == pytest.approx([statistics.mean(v) for v in values.values()])
    assert list(means.error_y.array) == pytest.approx([statistics.stdev(v) for v in values.values()])
    assert sorted(zip(seeds.x, seeds.y)) == sorted((k, v) for k, vs in values.items() for v in vs)
    assert seeds.marker.opacity < 1 and fig.layout.xaxis.type == "log"
    assert [shape.y0 for shape in fig.layout.shapes if shape.y0 == shape.y1] == [0.0]


def test_seeds_figure_names_what_is_not_stored_and_draws_no_spread_from_one_seed():
    rows = [seed_row(8, [0.80, 0.82]), seed_row(32, [0.81]), seed_row(256, [], missing=(0, 1, 2))]
    fig = plots.seeds_figure(rows, "bottleneck", "SST-2 vs r")
    (means,) = [t for t in fig.data if "each seed" not in t.name]
    assert list(means.x) == [8, 32] and list(means.error_y.array)[1] == 0.0
    assert "no stored run yet: 256" in fig.layout.title.text
    assert fig.layout.xaxis.type == "log" and list(fig.layout.xaxis.tickvals) == [8, 32, 256]


def test_seeds_figure_of_categories_is_a_linear_axis_without_a_line():
    rows = [seed_row(m, [0.8, 0.9], metric="accuracy") for m in ("head", "houlsby", "full")]
    fig = plots.seeds_figure({"SST-2": rows}, "method", "methods")
    (means,) = [t for t in fig.data if "each seed" not in t.name]
    assert fig.layout.xaxis.type != "log" and means.mode == "markers" and means.name == "SST-2"
    assert fig.layout.yaxis.title.text == plots.METRIC_AXES["accuracy"]


def test_seeds_figure_puts_the_papers_finding_with_its_source_above_the_plot():
    fig = plots.seeds_figure([seed_row(1e-2, [0.1, 0.2])], "init_scale", "CoLA", paper=PAPER["init_scale"])
    (note,) = [a for a in fig.layout.annotations if PAPER["init_scale"].source in a.text]
    assert str(PAPER["init_scale"].value) in note.text and note.yref == "paper" and note.y > 1


@pytest.mark.parametrize(("values", "log"), [([1e-6, 1e-4, 1.0], True), ([8, 64, 256], True),
                                             ([8, 16, 32], False), (["head", "full"], False), ([0.0, 1.0], False)])
def test_a_log_axis_for_numbers_spanning_a_decade(values, log):
    assert plots.spans_decades(values) is log
    fig = plots.seeds_figure([seed_row(v, [0.5, 0.6]) for v in values], "bottleneck", "r")
    assert (fig.layout.xaxis.type == "log") is log and fig.layout.xaxis.title.text.endswith("(log)") is log


def test_validation_curves_draw_one_line_per_stored_curve_on_a_validation_axis():
    curves = {"BitFit": [(125, 0.85), (250, 0.86)], "head only": [], "LoRA r=8": [(125, 0.8), (250, 0.88)]}
    fig = plots.validation_curves_figure(curves, "accuracy", "t")
    assert [trace.name for trace in fig.data] == ["BitFit", "LoRA r=8"]
    assert list(fig.data[1].y) == [0.8, 0.88] and list(fig.data[1].x) == [125, 250]
    assert fig.layout.yaxis.title.text.startswith("validation accuracy")


# ---------------------------------------------------------------- one look per method, text that fits

from adapterlab.runs.tradeoff import Point  # noqa: E402

#: Each method as the figures of the course spell it, written out here (not taken from plots).
SPELLINGS = {
    "Houlsby": ["Houlsby", "Houlsby adapters", "Houlsby r=64"],
    "Pfeiffer": ["Pfeiffer", "Pfeiffer adapters", "Pfeiffer r=64"],
    "parallel": ["Parallel adapters", "Parallel r=64"],
    "LoRA": ["LoRA", "LoRA r=8"],
    "top-k": ["top-k layers", "Top-k layers", "top-2 layers"],
    "LayerNorm only": ["LayerNorm only"],
    "BitFit": ["BitFit", "BitFit: biases only"],
    "head only": ["head only", "Head only"],
    "full": ["full fine-tuning", "Full fine-tuning"],
}
METHOD_OF = {spelling: method for method, spellings in SPELLINGS.items() for spelling in spellings}


def _method_figures():
    """Every figure that draws methods, each with the methods spelt one of the ways the labs spell them."""
    def row(label):
        return seed_row(label, [0.8, 0.82, 0.81], metric="accuracy")

    spellings = [spellings[i % len(spellings)] for i, spellings in enumerate(SPELLINGS.values())]
    others = [spellings[-1] for spellings in SPELLINGS.values()]
    return [
        plots.tradeoff_figure([Point(name, 1000 * (i + 1), row(name)) for i, name in enumerate(spellings)], "t",
                              note="Paper: adapters within 0.4 % of full fine-tuning. " * 3),
        plots.validation_curves_figure({name: [(100, 0.7), (200, 0.8)] for name in others + ["LoRA r=64"]},
                                       "accuracy", "v"),
        plots.curve_figure({name: [(1e-4, row(name)), (1e-3, row(name))] for name in ("Houlsby r=64", "full fine-tuning")},
                           "c", "peak learning rate (log)"),
        plots.methods_figure([{"method": name, "trained": 10 ** (i + 3), "value": 0.8} for i, name in enumerate(others)],
                             "accuracy"),
    ]


def test_every_method_keeps_one_colour_and_marker_in_every_figure_and_no_two_share_one():
    looks: dict[str, set] = {}
    for fig in _method_figures():
        in_figure = {}
        for trace in fig.data:
            if trace.name in METHOD_OF and trace.showlegend is not False:
                look = (trace.marker.color, trace.marker.symbol)
                looks.setdefault(METHOD_OF[trace.name], set()).add(look)
                in_figure.setdefault(look, set()).add(METHOD_OF[trace.name])
        assert all(len(methods) == 1 for methods in in_figure.values()), f"methods share a look: {in_figure}"
    assert set(looks) == set(SPELLINGS)
    assert all(len(found) == 1 for found in looks.values()), f"a method changes its look: {looks}"
    colours = [next(iter(found))[0] for found in looks.values()]
    assert len(set(colours)) == len(colours), "no two methods share a colour"


def test_two_sizes_of_one_method_differ_by_their_line():
    fig = plots.validation_curves_figure({"LoRA r=8": [(1, 0.5), (2, 0.6)], "LoRA r=64": [(1, 0.5), (2, 0.7)]}, "accuracy", "v")
    small, large = fig.data
    assert small.line.color == large.line.color and small.line.dash != large.line.dash


def test_the_tradeoff_note_sits_under_the_title_and_legends_sit_at_the_bottom_edge():
    tradeoff, curves = _method_figures()[:2]
    assert not [a for a in tradeoff.layout.annotations if a.yref == "paper" and a.y < 0], "nothing under the x axis"
    assert "Paper: adapters" in tradeoff.layout.title.subtitle.text
    assert all(len(line) <= plots.NOTE_CHARS for line in tradeoff.layout.title.subtitle.text.split("<br>"))
    for fig in (tradeoff, curves):
        legend = fig.layout.legend
        assert legend.orientation == "h" and legend.yref == "container" and legend.y == 0 and legend.yanchor == "bottom"
        assert fig.layout.margin.b >= 140, "room for the x-axis title and two rows of legend under the plot"


def test_a_long_y_axis_title_is_set_on_lines_that_fit():
    fig = plots.counts_figure({"houlsby": {"bottleneck": [8, 64], "trainable": [1e5, 1e6]}})
    title = "trainable parameters incl. the head (millions; log)"
    lines = fig.layout.yaxis.title.text.split("<br>")
    assert " ".join(lines) == title and len(lines) > 1 and max(map(len, lines)) <= plots.Y_TITLE_CHARS


def test_the_placement_diagram_draws_each_label_as_its_own_box_at_the_slides_font():
    """A box drawn as a rectangle in data units does not grow with its label's font (on a slide the labels
    spilled out); a box that is the label's background does."""
    fig = plots.placement_diagram()
    assert not [shape for shape in fig.layout.shapes if shape.type == "rect"]
    boxes = [a for a in fig.layout.annotations if a.bgcolor]
    labels = {a.text for a in boxes}
    assert {"adapter (bottleneck r)", "adapter × s", "add & the same LayerNorm", "hidden states in"} <= labels
    assert all(a.font.size >= 18 and a.borderwidth for a in boxes)
    assert fig.layout.height <= 420, "the height a slide gives it: nothing is squeezed on the slide"


def test_the_change_heatmaps_print_each_value_on_one_shared_log_scale():
    import numpy as np

    from adapterlab.teaching.notebook.plots import adapter_change_figure

    tables = {"at init": np.array([[0.006, 0.009], [0.007, 0.008]]), "trained": np.array([[0.4, 0.02], [0.2, 0.15]])}
    fig = adapter_change_figure(tables, "change")
    assert [[list(row) for row in trace.text] for trace in fig.data] == [[["0.006", "0.009"], ["0.007", "0.008"]],
                                                  [["0.400", "0.020"], ["0.200", "0.150"]]]
    assert np.allclose(np.array(fig.data[1].z, dtype=float), np.log10(tables["trained"]))
    assert {(trace.zmin, trace.zmax) for trace in fig.data} == {(-3, 0)}, "one colour scale for every panel"


def test_the_layer_figure_plots_points_lost_in_colours_no_method_uses():
    from adapterlab.teaching.notebook.plots import METHOD_STYLES, layer_importance_figure

    fig = layer_importance_figure({"SST-2": ([0.1, 0.3, 0.2], [0.01, -0.002, 0.017]), "CoLA": ([0.2, 0.1, 0.3], [0.1, 0, 0])})
    assert list(fig.data[0].y) == pytest.approx([1.0, -0.2, 1.7]) and list(fig.data[0].x) == [0.1, 0.3, 0.2]
    used = {trace.marker.color for trace in fig.data}
    assert len(used) == 2 and not used & {color for color, _ in METHOD_STYLES.values()}
    assert fig.layout.yaxis.range[1] > 10, "room above the highest point for its label"


def test_each_nonlinearity_keeps_its_colour_in_every_figure_whatever_the_order():
    first = plots.activations_figure(("gelu", "relu", "identity"))
    second = plots.activations_figure(("identity", "gelu", "relu"))
    fit = plots.linear_fit_figure({"init_scale": [1e-3, 1e-2], "d_model": 8, "bottleneck": 2,
                                   "residual": {"identity": [0.0, 0.0], "gelu": [0.1, 0.2], "relu": [0.3, 0.4]}})
    colours = [{trace.name: trace.line.color for trace in fig.data} for fig in (first, second, fit)]
    assert colours[0] == colours[1] == colours[2]
    assert len(set(colours[0].values())) == 3


def test_the_placements_of_the_count_figure_are_drawn_as_the_methods_they_are():
    """Pfeiffer and parallel train the same count at every r: their lines lie on each other, so each needs the
    marker (and colour) it has in every other figure; the marked choice is not taken for a method."""
    curves = {name: {"bottleneck": [8, 64], "trainable": [1e5, 1e6]} for name in ("houlsby", "pfeiffer", "parallel")}
    fig = plots.counts_figure(curves, current=("pfeiffer", 64, 1e6))
    for trace in fig.data[:3]:
        assert (trace.line.color, trace.marker.symbol) == plots.method_style(trace.name)
    assert plots.method_style(fig.data[3].name) is None


def test_the_training_figure_sets_its_axis_titles_on_lines_that_fit():
    history = History(steps=[1, 2], loss=[0.7, 0.6], evals=[{"step": 2, "loss": 0.6, "accuracy": 0.8}],
                      metric="accuracy")
    fig = plots.training_figure(history)
    titles = [fig.layout.yaxis.title.text, fig.layout.yaxis2.title.text]
    assert "cross-entropy loss" in titles[0] and "<br>" in titles[0]
    assert all(len(line) <= plots.PANEL_Y_TITLE_CHARS for title in titles for line in title.split("<br>"))


def test_the_training_curves_wear_greys_that_no_method_task_or_activation_wears():
    history = History(steps=[1, 2], loss=[0.7, 0.6], evals=[{"step": 2, "loss": 0.6, "matthews": 0.2}],
                      metric="matthews")
    worn = {trace.line.color for trace in plots.training_figure(history).data}
    assert worn == set(plots.TRAINING_COLORS.values())
    taken = {color for color, _ in plots.METHOD_STYLES.values()} | set(plots.ACTIVATION_COLORS.values()) | set(
        plots.SERIES_COLORS.values())
    assert worn.isdisjoint(taken)


def test_a_task_or_a_pooler_choice_keeps_its_colour_whatever_it_is_drawn_beside():
    alone, beside = plots._styles(["pooler trained"]), plots._styles(["pooler frozen", "pooler trained"])
    assert alone[0][0] == beside[1][0] != beside[0][0]
    assert plots._styles(["SST-2", "CoLA"])[0][0] == plots._styles(["CoLA", "SST-2"])[1][0] == plots.TASK_COLORS[0]
    assert {plots.method_style(name) and plots.method_style(name)[0] for name in plots.METHOD_STYLES} & {
        plots.TASK_COLORS[0], plots.TASK_COLORS[1]} == set(), "no method wears a task's colour"


def test_the_panel_s_placement_bars_wear_their_methods_colours():
    rows = [{"placement": name, "value": 0.8, "trained": 1000, "metric": "accuracy"}
            for name in ("houlsby", "pfeiffer", "parallel", "head")]
    [bars] = plots.sweep_figure(rows, "placement", "placements").data
    assert list(bars.marker.color) == [plots.METHOD_STYLES[key][0] for key in ("houlsby", "pfeiffer", "parallel",
                                                                             "head only")]


def test_the_span_ablation_heatmap_gives_its_scores_as_the_title_s_subtitle():
    ablation = SimpleNamespace(num_layers=2, scores=[[0.8, 0.7], [float("nan"), 0.85]], metric="accuracy",
                               full=0.863, all_removed=0.7)
    title = plots.span_ablation_figure(ablation, majority=0.51, backbone="tiny").layout.title
    assert title.text == "Adapters switched off in layers first…last, tiny"  # a slide heading of its own
    assert title.subtitle.text == "all on 0.863; all off 0.700; majority class 0.510"


def test_a_setting_is_drawn_in_a_colour_no_method_and_no_task_has():
    """Lab 7 drew Houlsby adapters under two settings in Houlsby's blue and LoRA's orange, and one setting on an
    SST-2 figure in blue: a reader took orange for LoRA and blue for SST-2. Settings, recurring or not, wear
    colours of their own, and two settings in one figure differ."""
    taken = {colour for colour, _ in plots.METHOD_STYLES.values()} | set(plots.TASK_COLORS)
    labels = ["pooler trained", "pooler frozen", "300 steps, lr 1e-3", "three epochs, tuned rate"]
    colours = [colour for colour, _, _ in plots._styles(labels)]
    assert len(set(colours)) == 4 and not set(colours) & taken, colours
    assert [colour for colour, _, _ in plots._styles(labels[2:])] == colours[2:], "the same colour in every figure"


def test_series_that_are_no_method_are_drawn_in_greys_that_no_method_or_task_wears():
    """Lab 9 drew batch 32 in LoRA's orange beside a bar named LoRA, lab 11 a layer in Houlsby's blue, lab 6 the
    ways of cutting batches in the first three method colours: series that are levels or parts of one thing are
    greys, two of them told apart at a glance; a bar that names a method keeps its method's colour."""
    taken = {colour for colour, _ in plots.METHOD_STYLES.values()} | set(plots.TASK_COLORS)
    assert not set(plots.LEVEL_COLORS) & taken
    batch = [SimpleNamespace(label=f"batch {n}", rows=lambda: [{"variant": "houlsby", "overhead_percent": 5.0,
                                                                "median_ms": 60.0}]) for n in (1, 32)]
    sweep = {"init_scale": [1e-3, 1e-2], "hidden_deviation": [1e-4, 1e-3], "max_logit_change": [1e-3, 1e-2],
             "deviation": [1e-6, 1e-4], "predicted": [1e-6, 1e-4], "grad_up": [1e-3, 1e-2], "grad_down": [0.0, 1e-5]}
    drawn = {
        "overhead": [trace.marker.color for trace in plots.overhead_figure(batch, "overhead").data],
        "singular values": [trace.marker.color for trace in plots.singular_values_figure(
            {"layer 4, attention": [3.0, 1.0], "layer 5, ffn": [2.0, 0.5]}, 1).data],
        "padding": list(plots.padding_figure({"fixed 128": 8.6, "shuffled": 2.0, "grouped": 0.05}, 32).data[0].marker.color),
        "deviation": [trace.line.color for trace in plots.model_deviation_figure(sweep, "tiny").data],
        "step zero": [trace.line.color for trace in plots.init_scale_figure(sweep).data],
    }
    for name, colours in drawn.items():
        assert set(colours) <= set(plots.LEVEL_COLORS), f"{name}: {colours}"
    for name in ("overhead", "singular values", "padding", "deviation"):
        assert len(set(drawn[name])) == len(drawn[name]), f"{name}: two series share a grey"
    measured, theory, grad_up, grad_down = drawn["step zero"]
    assert measured == theory and len({measured, grad_up, grad_down}) == 3, "the theory is drawn as what it predicts"
    bars = plots.latency_figure({"original": 0.01, "Houlsby r=64": 0.011, "folded": 0.01}, "latency").data[0]
    assert list(bars.marker.color) == [plots.LEVEL_COLORS[0], plots.METHOD_STYLES["houlsby"][0], plots.LEVEL_COLORS[2]]
