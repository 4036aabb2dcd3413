"""Plotly figures for the labs. Presentation only: every number comes from the caller.

Each function takes the columns another module computed and returns a ``go.Figure`` with a title,
axis titles and units. :func:`setup_notebook` makes a notebook store each figure as plotly's JSON
output only (no copy of plotly.js per cell), which keeps committed notebooks small; a slide deck
embeds plotly.js once.
"""

from __future__ import annotations

import itertools
import json
import math
import textwrap

import plotly.graph_objects as go
import plotly.io as pio
import torch

from ...model.adapter import ORIGINAL_CODE_INIT_SCALE, PAPER_INIT_SCALE, make_activation
from ...runs.reference import SeedRow
from ...runs.tradeoff import Point

TEMPLATE = "plotly_white"
COLORS = {"frozen": "#d9d9d9", "adapter": "#f28e2b", "layernorm": "#a0c4e8", "head": "#59a14f", "io": "#ffffff"}
LINE_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"]
#: Two tasks side by side (lab 11), in colours no method uses.
TASK_COLORS = ["#59a14f", "#555555"]
#: Series that are no method and no task (a setting: the pooler trained or frozen, a schedule), in colours that
#: no method and no task uses: a lab 7 figure of Houlsby adapters under two settings drew them in Houlsby's
#: blue and LoRA's orange, and a single setting on an SST-2 figure read as SST-2 drawn in blue.
SETTING_COLORS = ["#b6992d", "#d37295", "#79706e", "#4b4b8f"]
#: Series that are no method but recur across figures, each in one colour: the tasks (lab 11's colours, which
#: no method uses) and the pooler's two choices (lab 7 drew "pooler trained" blue alone, orange beside "frozen").
SERIES_COLORS = {"sst-2": TASK_COLORS[0], "cola": TASK_COLORS[1], "pooler trained": SETTING_COLORS[0],
                 "pooler frozen": SETTING_COLORS[1]}
#: The setting colours no recurring series has: other settings take them in turn.
SPARE_SETTING_COLORS = [colour for colour in SETTING_COLORS if colour not in SERIES_COLORS.values()]
#: Series that are levels or parts of one thing, no method, task or setting (batch 1 and batch 32, two layers, the
#: ways of cutting batches, a model before and after a fold): greys, dark, light, then between, so that no bar or
#: point reads as a method (lab 9 drew batch 32 in LoRA's orange beside a bar named LoRA).
LEVEL_COLORS = ["#262626", "#a3a3a3", "#636363"]
#: One colour per nonlinearity in every figure of the course (labs 1 and 3 draw them in different orders).
ACTIVATION_COLORS = {"gelu": "#4e79a7", "relu": "#f28e2b", "identity": "#59a14f", "tanh": "#e15759",
                     "silu": "#76b7b2", "sigmoid": "#b07aa1"}


def activation_color(name: str, k: int = 0) -> str:
    """The colour of nonlinearity ``name`` (another name takes the ``k``-th of LINE_COLORS)."""
    return ACTIVATION_COLORS.get(str(name).lower(), LINE_COLORS[k % len(LINE_COLORS)])

#: One colour and one marker per training method, in every figure of the course: a reader who learnt that
#: orange diamonds are LoRA in lab 10's first figure reads the next figure without its legend. The key is
#: what a figure's label starts with (lower case): "Houlsby r=64", "Houlsby adapters" and "Houlsby" are one
#: method. Colours from Tableau 10; no two methods share one.
METHOD_STYLES = {
    "houlsby": ("#4e79a7", "circle"),
    "pfeiffer": ("#76b7b2", "square"),
    "parallel": ("#9c755f", "diamond-wide"),
    "lora": ("#f28e2b", "diamond"),
    "top-": ("#b07aa1", "triangle-up"),
    "layernorm only": ("#edc948", "pentagon"),
    "bitfit": ("#ff9da7", "star"),
    "head only": ("#bab0ac", "x"),
    "head": ("#bab0ac", "x"),  # the training panel's placement "head": the head only
    "full fine-tuning": ("#e15759", "hexagon"),
}


def setup_notebook() -> None:
    """Store figures as plotly JSON (``application/vnd.plotly.v1+json``) with a clean template."""
    pio.renderers.default = "plotly_mimetype"
    pio.templates.default = TEMPLATE


def display_data(fig: go.Figure) -> dict:
    """The figure as a Jupyter display_data output (plotly JSON + a text line), for an ipywidgets.Output."""
    spec = json.loads(fig.to_json())
    return {
        "output_type": "display_data",
        "data": {
            "application/vnd.plotly.v1+json": {"data": spec["data"], "layout": spec["layout"], "config": {}},
            "text/plain": f"<Figure: {fig.layout.title.text}>",
        },
        "metadata": {},
    }


def method_style(label: str) -> tuple[str, str] | None:
    """(colour, marker) of the training method a trace label names, or None for a label that is no method."""
    name = str(label).lower()
    return next((style for key, style in METHOD_STYLES.items() if name.startswith(key)), None)


def series_color(label: str) -> str | None:
    """The fixed colour of a recurring series that is no method (:data:`SERIES_COLORS`), or None."""
    return SERIES_COLORS.get(str(label).lower())


def _styles(labels) -> list[tuple[str, str, str]]:
    """(colour, marker, line dash) per label: a method's own colour and marker, a solid line for its first
    trace and a dashed one for the next (LoRA r=8, then LoRA r=64); a recurring series its own colour; other
    labels (settings of one method) take the SPARE_SETTING_COLORS in turn."""
    styles, seen, others = [], set(), 0
    for label in labels:
        style = method_style(label) or (series_color(label) and (series_color(label), "circle"))
        if style is None:
            style = (SPARE_SETTING_COLORS[others % len(SPARE_SETTING_COLORS)], "circle")
            others += 1
        styles.append((*style, "dash" if style in seen else "solid"))
        seen.add(style)
    return styles


#: A y-axis title longer than this is set on two lines (one line would pass the plot's height and be cut).
Y_TITLE_CHARS = 34


def _axis_title(text: str, width: int = Y_TITLE_CHARS) -> str:
    """`text` broken at spaces into lines of at most `width` characters (plotly's <br>)."""
    return "<br>".join(textwrap.wrap(text, width, break_long_words=False)) if len(text) > width else text


def _legend_below(fig: go.Figure) -> None:
    """A horizontal legend at the figure's bottom edge, under the x-axis title (placed in the figure, not
    the plot, so that a figure given less height on a slide keeps them apart): a long legend wraps into
    rows instead of scrolling."""
    fig.update_layout(legend=dict(orientation="h", yref="container", yanchor="bottom", y=0, x=0,
                                  bgcolor="rgba(0,0,0,0)"), margin=dict(b=150))


def _layout(fig: go.Figure, title: str, x: str, y: str, log_x: bool = False, log_y: bool = False) -> go.Figure:
    fig.update_layout(
        title=title, template=TEMPLATE, height=420, margin=dict(l=70, r=30, t=70, b=60),
        legend=dict(bgcolor="rgba(255,255,255,0.7)"), font=dict(size=14),
    )
    fig.update_xaxes(title=x, automargin=True)
    fig.update_yaxes(title=_axis_title(y), automargin=True)
    if log_x:
        fig.update_xaxes(type="log", exponentformat="power")
    if log_y:
        fig.update_yaxes(type="log", exponentformat="power")
    return fig


def activations_figure(names=("gelu", "relu", "identity"), lo: float = -3.0, hi: float = 3.0) -> go.Figure:
    """The nonlinearities an adapter may use, on [lo, hi]."""
    x = torch.linspace(lo, hi, 121)
    fig = go.Figure()
    for k, name in enumerate(names):
        with torch.no_grad():
            fig.add_scatter(x=x.tolist(), y=make_activation(name)(x).tolist(), mode="lines", name=name,
                            line_color=activation_color(name, k))
    return _layout(fig, "The nonlinearity f acts on each of the r numbers separately", "input z", "f(z)")


def _add_baseline_and_marks(fig: go.Figure, baseline, setting: str) -> None:
    """The dotted baseline (label, value) when given, and on an init-scale axis the σ values the paper and the
    original code use: what every sweep figure draws behind its runs."""
    if baseline is not None:
        fig.add_hline(y=baseline[1], line_dash="dot", line_color="gray", annotation_text=baseline[0],
                      annotation_position="bottom right")
    if setting == "init_scale":
        _mark_init_scales(fig)


def _mark_init_scales(fig: go.Figure) -> None:
    """Dashed lines at the original code's and the paper's init scales, for a figure whose x axis is log σ.

    On a log axis an annotation's x is log10 of the value while a shape's x is the value itself, so the
    labels are placed by hand (``add_vline``'s own annotation would land at x = 0.01 decades).
    """
    for value, text, dash in ((ORIGINAL_CODE_INIT_SCALE, "1e-3: original code", "dot"),
                              (PAPER_INIT_SCALE, "1e-2: paper", "dash")):
        fig.add_vline(x=value, line_dash=dash, line_color="gray")
        fig.add_annotation(x=math.log10(value), y=1, yref="paper", text=text, showarrow=False,
                           xanchor="right" if dash == "dot" else "left", yanchor="bottom")


def model_deviation_figure(sweep: dict, backbone: str) -> go.Figure:
    """A whole model's last-hidden-state deviation and max |Δlogit| against the adapters' init scale."""
    fig = go.Figure()
    fig.add_scatter(x=sweep["init_scale"], y=sweep["hidden_deviation"], mode="lines+markers",
                    name="‖ΔH‖ / ‖H‖, last hidden state", line_color=LEVEL_COLORS[0])
    fig.add_scatter(x=sweep["init_scale"], y=sweep["max_logit_change"], mode="lines+markers",
                    name="max |Δlogit|", line_color=LEVEL_COLORS[1])
    _mark_init_scales(fig)
    return _layout(fig, f"How far adapters move {backbone} at step zero", "init scale σ (log)",
                   "change (relative, or logit units; log)", log_x=True, log_y=True)


def init_scale_figure(sweep: dict, current: dict | None = None) -> go.Figure:
    """One adapter: deviation (measured, and its small-σ theory dashed in the same grey) and step-zero gradient
    norms against σ."""
    fig = go.Figure()
    series = [
        ("deviation", "‖A(h) − h‖ / ‖h‖ (measured)", "solid", 3, LEVEL_COLORS[0]),
        ("predicted", "σ² theory: ½·v·σ²·√(rd)", "dash", 2, LEVEL_COLORS[0]),
        ("grad_up", "‖∂L/∂W_up‖", "solid", 5, LEVEL_COLORS[1]),
        ("grad_down", "‖∂L/∂W_down‖", "dot", 2, LEVEL_COLORS[2]),
    ]
    for key, name, dash, width, color in series:
        fig.add_scatter(x=sweep["init_scale"], y=sweep[key], mode="lines", name=name,
                        line=dict(color=color, dash=dash, width=width))
    if current is not None:
        keys = ["deviation", "grad_up", "grad_down"]
        fig.add_scatter(x=[current["init_scale"]] * 3, y=[current[k] for k in keys], mode="markers",
                        marker=dict(size=12, color="black", symbol="circle-open", line_width=2),
                        name=f"σ = {current['init_scale']:.1e}")
    _mark_init_scales(fig)
    return _layout(fig, "One adapter at step zero: deviation grows like σ², gradients like σ",
                   "init scale σ (log)", "value (dimensionless; log)", log_x=True, log_y=True)


def singular_values_figure(values: dict, bottleneck: int,
                           title: str = "Singular values: a rank-r update has only r that are not zero") -> go.Figure:
    """Singular values (log) of one or more matrices, e.g. W_up W_down for a linear adapter."""
    fig = go.Figure()
    for (name, s), color in zip(values.items(), itertools.cycle(LEVEL_COLORS)):
        s = [max(float(v), 1e-30) for v in s]
        fig.add_scatter(x=list(range(1, len(s) + 1)), y=s, mode="markers", name=name, marker_color=color)
    fig.add_vline(x=bottleneck + 0.5, line_dash="dash", line_color="gray", annotation_text=f"r = {bottleneck}")
    return _layout(fig, title, "index (largest first)", "singular value (log)", log_y=True)


def linear_fit_figure(sweep: dict) -> go.Figure:
    """Relative residual of the best affine fit of an adapter's correction, per activation, against σ."""
    fig = go.Figure()
    for k, (name, residuals) in enumerate(sweep["residual"].items()):
        fig.add_scatter(x=sweep["init_scale"], y=[max(r, 1e-17) for r in residuals], mode="lines+markers",
                        name=name, line_color=activation_color(name, k))
    return _layout(fig, f"What the best linear map misses of an adapter's correction (d = {sweep['d_model']}, "
                        f"r = {sweep['bottleneck']})",
                   "weight scale σ (log)", "relative residual ‖fit − Δ‖ / ‖Δ‖ (log)", log_x=True, log_y=True)


def latency_figure(seconds: dict, title: str) -> go.Figure:
    """A bar per variant: median milliseconds per forward pass, in its method's colour where it names one, else in
    a grey (the model before and after a fold is no method)."""
    names = list(seconds)
    colours = [(method_style(name) or (LEVEL_COLORS[k % len(LEVEL_COLORS)],))[0] for k, name in enumerate(names)]
    fig = go.Figure(go.Bar(x=names, y=[1e3 * seconds[n] for n in names], marker_color=colours,
                           text=[f"{1e3 * seconds[n]:.1f} ms" for n in names], textposition="outside"))
    return _layout(fig, title, "model", "median time per forward pass (ms)")


def counts_figure(curves: dict, current: tuple[str, int, int] | None = None, backbone: str = "") -> go.Figure:
    """Trainable parameters against the bottleneck r, one line per placement.

    ``curves`` maps a placement to {"bottleneck": [...], "trainable": [...]}; ``current`` is
    (placement, r, trainable) to mark.
    """
    fig = go.Figure()
    for (name, curve), (color, marker, _) in zip(curves.items(), _styles(curves)):
        fig.add_scatter(x=curve["bottleneck"], y=[t / 1e6 for t in curve["trainable"]], mode="lines+markers",
                        name=name, line_color=color, marker_symbol=marker)
    if current is not None:
        placement, r, trainable = current
        fig.add_scatter(x=[r], y=[trainable / 1e6], mode="markers", name=f"your choice: {placement}, r = {r}",
                        marker=dict(size=14, color="black", symbol="circle-open", line_width=2))
    return _layout(fig, f"Trainable parameters per task{', ' + backbone if backbone else ''}",
                   "bottleneck r (log)", "trainable parameters incl. the head (millions; log)", log_x=True, log_y=True)


def trainable_bars_figure(rows: dict, title: str) -> go.Figure:
    """Stacked bars: for each variant (key), trainable parameters per group (adapters, LayerNorms, classifier and trained pooler)."""
    fig = go.Figure()
    groups = (("adapters", "adapters", COLORS["adapter"]), ("layernorm", "LayerNorms", COLORS["layernorm"]),
              ("head", "classifier (+ pooler if trained)", COLORS["head"]))
    for group, name, color in groups:
        fig.add_bar(x=list(rows), y=[rows[v][group] for v in rows], name=name, marker_color=color)
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "placement", "trainable parameters")


# --------------------------------------------------------------------------------------------------
# A BERT layer, drawn
# --------------------------------------------------------------------------------------------------

#: One BERT layer from bottom to top as (label, kind) per placement; kind "adapter" is a serial adapter.
_LAYERS = {
    "houlsby": [("hidden states in", "io"), ("attention + projection", "frozen"), ("adapter (bottleneck r)", "adapter"),
                ("add & LayerNorm", "layernorm"), ("feed-forward d → 4d → d", "frozen"),
                ("adapter (bottleneck r)", "adapter"), ("add & LayerNorm", "layernorm"), ("hidden states out", "io")],
    # Pfeiffer's adapter reads the output of the FFN's add & LayerNorm, and the same LayerNorm runs again after it.
    "pfeiffer": [("hidden states in", "io"), ("attention + projection", "frozen"), ("add & LayerNorm", "layernorm"),
                 ("feed-forward d → 4d → d", "frozen"), ("add & LayerNorm", "layernorm"),
                 ("adapter (bottleneck r)", "adapter"), ("add & the same LayerNorm", "layernorm"),
                 ("hidden states out", "io")],
    "parallel": [("hidden states in", "io"), ("attention + projection", "frozen"), ("add & LayerNorm", "layernorm"),
                 ("feed-forward d → 4d → d", "frozen"), ("add & LayerNorm", "layernorm"), ("hidden states out", "io")],
}
#: Residual connections per placement: (row the skip leaves, row it joins, side, how far out: 0 or 1).
_SKIPS = {"houlsby": [(0, 3, -1, 0), (3, 6, -1, 0)],
          "pfeiffer": [(0, 2, -1, 0), (2, 4, -1, 0), (2, 6, -1, 1), (3, 6, 1, 0)],
          "parallel": [(0, 2, -1, 0), (2, 4, -1, 0)]}
DIAGRAM_FONT_PX = 18  # the deck's smallest figure text: the diagram is drawn at it, so nothing grows on a slide
DIAGRAM_HEIGHT_PX = 420  # the height a slide gives a figure
_COLUMN_GAP, _SKIP_OUT, _ROW = 5.0, 2.1, 1.0  # in data units: columns apart, a skip's distance from the column, a row


def _label_box(fig, x, y, label, color, dash=False):
    """A box that is its label's own background: plotly sizes it to the text, so a label never spills out."""
    fig.add_annotation(x=x, y=y, text=label, showarrow=False, bgcolor=color, bordercolor="#555", borderwidth=1,
                       borderpad=4, font=dict(size=DIAGRAM_FONT_PX, color="#222"))


def _path(fig, points, color="#999", dash="dot"):
    """A line through `points` (data units), drawn under the boxes."""
    path = "M " + " L ".join(f"{x},{y}" for x, y in points)
    fig.add_shape(type="path", path=path, line=dict(color=color, dash=dash, width=1.5), layer="below")


def placement_diagram(train_layernorm: bool = True) -> go.Figure:
    """Houlsby, Pfeiffer and parallel adapters inside one BERT layer, side by side (lab 5).

    Orange: adapters (trained); blue: LayerNorms (trained when train_layernorm, else grey); grey:
    frozen pretrained weights; dotted: residual connections. Read bottom to top, like the paper. Each box
    is its label's background, sized by plotly to the text at DIAGRAM_FONT_PX, and the figure is as high as
    a slide gives it, so on a slide and in JupyterLab the labels stay inside their boxes.
    """
    fig = go.Figure()
    colors = dict(COLORS, layernorm=COLORS["layernorm"] if train_layernorm else COLORS["frozen"])
    for column, (placement, layer) in enumerate(_LAYERS.items()):
        x = _COLUMN_GAP * column
        _path(fig, [(x, 0), (x, _ROW * (len(layer) - 1))], color="#555", dash="solid")
        for row, (label, kind) in enumerate(layer):
            _label_box(fig, x, _ROW * row, label, colors[kind])
        for start, end, side, level in _SKIPS[placement]:
            out = x + side * (_SKIP_OUT + 0.4 * level)
            _path(fig, [(x, _ROW * start), (out, _ROW * start), (out, _ROW * end), (x, _ROW * end)])
        if placement == "parallel":  # the adapter reads the FFN's input and joins its output, beside it
            side = x + _SKIP_OUT + 0.3
            _path(fig, [(x, _ROW * 2), (side, _ROW * 2), (side, _ROW * 4), (x, _ROW * 4)], color=COLORS["adapter"],
                  dash="solid")
            _label_box(fig, side, _ROW * 3, "adapter × s", colors["adapter"])
        fig.add_annotation(x=x, y=_ROW * 8, text=f"<b>{placement}</b>", showarrow=False,
                           font=dict(size=DIAGRAM_FONT_PX + 2))
    legend = (("adapter (trained)", colors["adapter"]),
              (f"LayerNorm ({'trained' if train_layernorm else 'frozen'})", colors["layernorm"]),
              ("frozen", colors["frozen"]))
    for name, color in legend:
        fig.add_scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(size=16, symbol="square", color=color))
    fig.update_xaxes(visible=False, range=[-_SKIP_OUT - 1.4, 2 * _COLUMN_GAP + _SKIP_OUT + 1.8], fixedrange=True)
    fig.update_yaxes(visible=False, range=[-0.6, _ROW * 8.5], fixedrange=True)
    fig.update_layout(
        title="Where the adapters go in one BERT layer (read bottom to top; dotted: residual connections)",
        template=TEMPLATE, height=DIAGRAM_HEIGHT_PX, margin=dict(l=10, r=10, t=50, b=40),
        font=dict(size=DIAGRAM_FONT_PX), legend=dict(orientation="h", y=-0.02, yanchor="top", x=0.2),
    )
    return fig


# --------------------------------------------------------------------------------------------------
# Training, sweeps, ablation and serving (labs 6–9)
# --------------------------------------------------------------------------------------------------

#: How each metric reads on an axis (fractions, as adapterlab.data.compute_metrics returns them).
METRIC_AXES = {
    "accuracy": "dev accuracy (fraction correct)",
    "matthews": "dev Matthews correlation (−1 … 1)",
    "f1": "dev F1 (0 … 1)",
}


#: The training curves' greys: one run's losses and score, which no method, task or activation colour may
#: suggest (a red eval loss read as full fine-tuning).
TRAINING_COLORS = {"training loss": "#a6a6a6", "eval": "#2f2f2f"}
#: A y-axis title of a figure of two panels longer than this is set on more lines: each panel is half as wide
#: and, on a slide, less tall (lab 7's "dev Matthews correlation (−1 … 1)" lost its bracket on one line).
PANEL_Y_TITLE_CHARS = 24


def training_figure(history) -> go.Figure:
    """Training loss (every step) and eval loss against the step, and the main metric against the step
    (lab 6's live plot and the training panel of labs 6 and 7). ``history`` is a
    :class:`adapterlab.training.History`."""
    from plotly.subplots import make_subplots

    # the gap between the panels holds the second panel's y-axis title, on two lines
    figure = make_subplots(rows=1, cols=2, subplot_titles=("Loss", f"{history.metric} on the eval set"),
                           horizontal_spacing=0.16)
    figure.add_scatter(x=history.steps, y=history.loss, mode="lines", name="training loss (per step)",
                       line=dict(width=1, color=TRAINING_COLORS["training loss"]), row=1, col=1)
    eval_steps = [e["step"] for e in history.evals]
    figure.add_scatter(x=eval_steps, y=[e["loss"] for e in history.evals], mode="lines+markers",
                       name="eval loss", line=dict(color=TRAINING_COLORS["eval"]), row=1, col=1)
    figure.add_scatter(x=eval_steps, y=[e.get(history.metric) for e in history.evals], mode="lines+markers",
                       name=f"eval {history.metric}", line=dict(color=TRAINING_COLORS["eval"]),
                       marker=dict(symbol="square"), row=1, col=2)
    for col in (1, 2):
        figure.update_xaxes(title_text="step (optimizer updates)", row=1, col=col)
    loss_title, metric_title = "cross-entropy loss (nats per example)", METRIC_AXES.get(history.metric, history.metric)
    figure.update_yaxes(title_text=_axis_title(loss_title, PANEL_Y_TITLE_CHARS), row=1, col=1)
    figure.update_yaxes(title_text=_axis_title(metric_title, PANEL_Y_TITLE_CHARS), row=1, col=2)
    figure.update_yaxes(automargin=True)
    # A horizontal legend's default place is on top of the x-axis titles: put it below them.
    figure.update_layout(title_text=history.title or "Training", height=420, margin=dict(b=110), template=TEMPLATE,
                         legend=dict(orientation="h", yanchor="top", y=-0.3, x=0))
    return figure


def live_history():
    """A ``callback`` for :func:`adapterlab.training.run_experiment` that draws the training curves in
    the cell's output and redraws them at every evaluation (the cell keeps the final figure)."""
    from IPython.display import display

    handle = None

    def callback(history) -> None:
        nonlocal handle
        # The raw bundle, not the figure: a plotly figure displays itself and would ignore display_id.
        bundle = display_data(training_figure(history))["data"]
        if handle is None:
            handle = display(bundle, raw=True, display_id=True)
        else:
            handle.update(bundle, raw=True)

    return callback


def padding_figure(waste: dict, batch_size: int) -> go.Figure:
    """Padding per real token for each way of cutting batches (``waste`` maps a name to padded/real)."""
    names = list(waste)
    fig = go.Figure(go.Bar(x=names, y=[100 * waste[n] for n in names], marker_color=[LEVEL_COLORS[k % len(LEVEL_COLORS)] for k in range(len(names))],
                           text=[f"{100 * waste[n]:.0f} %" for n in names], textposition="outside"))
    return _layout(fig, f"Padding in batches of {batch_size}: wasted compute per real token",
                   "how batches are cut", "padded tokens per real token (%)")


def methods_figure(rows: list[dict], metric: str) -> go.Figure:
    """The dev metric against trained parameters (log), one point per method (paper Fig. 1 in small).

    Each row holds ``method``, ``trained`` and ``value`` (the metric)."""
    fig = go.Figure()
    for row, (color, symbol, _) in zip(rows, _styles(row["method"] for row in rows)):
        fig.add_scatter(x=[row["trained"]], y=[row["value"]], mode="markers+text", name=row["method"],
                        text=[row["method"]], textposition="top center",
                        marker=dict(size=14, color=color, symbol=symbol))
    return _layout(fig, "What each method trains, and what it reaches", "trained parameters (log)",
                   METRIC_AXES.get(metric, metric), log_x=True)


def sweep_figure(rows: list[dict], control: str, title: str, baseline: tuple[str, float] | None = None) -> go.Figure:
    """The dev metric against one setting of the training panel (rows of ``TrainingPanel.runs``).

    ``control`` is the setting swept: "placement" gives bars, a numeric one a line (log axis for
    bottleneck, init_scale and learning_rate; the paper's and the original code's init scales marked).
    Diverged runs are left out of the line and named in the title. ``baseline`` = (label, value)
    draws a horizontal reference line, e.g. the majority class.
    """
    done = [row for row in rows if row["value"] is not None]
    metric = done[0]["metric"] if done else "accuracy"
    failed = [row for row in rows if row["value"] is None]
    if failed:
        title += f" ({len(failed)} diverged: {', '.join(str(row[control]) for row in failed)})"
    fig = go.Figure()
    if control == "placement":
        placements = [row["placement"] for row in done]
        fig.add_bar(x=placements, y=[row["value"] for row in done],
                    marker_color=[color for color, _, _ in _styles(placements)],
                    text=[f"{row['trained']:,} trained" for row in done],
                    textposition="outside", name=metric)
    else:
        fig.add_scatter(x=[row[control] for row in done], y=[row["value"] for row in done], mode="lines+markers",
                        name=metric, line_color=LEVEL_COLORS[0], marker_size=10,
                        customdata=[[row["trained"]] for row in done],
                        hovertemplate="%{x}: %{y:.3f}<br>%{customdata[0]:,} trained parameters<extra></extra>")
    _add_baseline_and_marks(fig, baseline, control)
    labels = {"placement": "placement", "bottleneck": "bottleneck r (log)", "init_scale": "init scale σ (log)",
              "learning_rate": "peak learning rate (log)", "steps": "training steps"}
    log_x = control in ("bottleneck", "init_scale", "learning_rate")
    fig = _layout(fig, title, labels[control], METRIC_AXES.get(metric, metric), log_x=log_x)
    if control == "bottleneck":
        fig.update_xaxes(type="log", tickvals=[row["bottleneck"] for row in done], exponentformat="none")
    return fig


_SETTING_AXES = {"placement": "placement", "bottleneck": "bottleneck r (log)", "init_scale": "init scale σ (log)",
                 "learning_rate": "peak learning rate (log)", "steps": "training steps", "method": "method"}


def _numeric(values) -> bool:
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)


def spans_decades(values) -> bool:
    """Whether numbers are best read on a log axis: all positive and spanning a decade or more."""
    values = list(values)
    return len(values) > 1 and _numeric(values) and min(values) > 0 and max(values) / min(values) >= 10


def seeds_figure(series, setting: str, title: str, baseline: tuple[str, float] | None = None,
                 paper=None) -> go.Figure:
    """Mean ± sample std over the seeds per setting value, each seed a faint point (labs 6 and 7).

    ``series`` is a list of :class:`adapterlab.experiments.SeedRow` or a dict name → such a list (say,
    the pooler frozen and trained), drawn on one axis. Numeric values spanning a decade or more get a
    log axis (for the init scale, the paper's and the original code's σ are marked); other labels are
    categories. A value with no stored run is left out and named in the title. ``baseline`` = (label, value)
    draws a horizontal line (the majority class); ``paper`` (an :class:`adapterlab.experiments.PaperValue`)
    puts what the paper reports above the plot.
    """
    series = series if isinstance(series, dict) else {"mean ± std over seeds": series}
    everything = [row for rows in series.values() for row in rows]
    metric = next((row.metric for row in everything if row.metric), "accuracy")
    log_x = spans_decades([row.label for row in everything])
    line = _numeric([row.label for row in everything])
    empty = list(dict.fromkeys(f"{row.label:g}" if line else str(row.label) for row in everything if row.n == 0))
    if empty:
        title += f" (no stored run yet: {', '.join(empty)})"
    fig = go.Figure()
    for (name, rows), (color, symbol, _) in zip(series.items(), _styles(series)):
        shown = [row for row in rows if row.n > 0]
        fig.add_scatter(
            x=[row.label for row in shown], y=[row.mean for row in shown], name=name, line_color=color,
            mode="lines+markers" if line else "markers", marker=dict(size=10, symbol=symbol),
            error_y=dict(type="data", array=[0.0 if row.n < 2 else row.std for row in shown], visible=True),
            customdata=[[row.n, len(row.seeds) + len(row.missing), row.diverged] for row in shown],
            hovertemplate="%{x}: mean %{y:.3f}<br>%{customdata[0]} of %{customdata[1]} seeds with a metric, "
                          "%{customdata[2]} diverged<extra></extra>")
        fig.add_scatter(x=[row.label for row in shown for _ in row.values], y=[v for row in shown for v in row.values],
                        mode="markers", marker=dict(size=7, color=color, opacity=0.35), name=f"{name}: each seed",
                        hovertemplate="%{x}: %{y:.3f} (one seed)<extra></extra>")
    _add_baseline_and_marks(fig, baseline, setting)
    if paper is not None:
        fig.add_annotation(x=0, xref="paper", y=1.09, yref="paper", yanchor="bottom", xanchor="left", showarrow=False,
                           text=f"{paper.source}: {paper.value}", font=dict(size=12, color="gray"))
    axis = _SETTING_AXES.get(setting, setting).removesuffix(" (log)") + (" (log)" if log_x else "")
    fig = _layout(fig, title, axis, METRIC_AXES.get(metric, metric), log_x=log_x)
    if log_x and setting != "init_scale":
        fig.update_xaxes(tickvals=sorted({row.label for row in everything}), exponentformat="none")
    fig.update_layout(margin=dict(t=100))
    return fig


def span_ablation_figure(ablation, majority: float | None = None, backbone: str = "") -> go.Figure:
    """Heatmap of the metric with the adapters of layers first..last switched off (paper Fig. 6 left).

    ``ablation`` is an :class:`adapterlab.ablation.SpanAblation`; ``majority`` the majority-class
    score, named in the title beside the full model's and the all-removed one.
    """
    n = ablation.num_layers
    z = [[None if v != v else float(v) for v in row] for row in ablation.scores]  # NaN → empty cell
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(n)), y=list(range(n)), colorscale="Viridis", texttemplate="%{z:.2f}",
        colorbar=dict(title=ablation.metric), hovertemplate="layers %{y}–%{x} off: %{z:.3f}<extra></extra>",
    ))
    parts = [f"all on {ablation.full:.3f}", f"all off {ablation.all_removed:.3f}"]
    if majority is not None:
        parts.append(f"majority class {majority:.3f}")
    title = f"Adapters switched off in layers first…last{', ' + backbone if backbone else ''}"
    fig = _layout(fig, title, "last layer switched off", "first layer switched off")
    # the scores as the title's subtitle: a slide that takes the title for its heading keeps them in the figure
    fig.update_layout(title=dict(subtitle=dict(text="; ".join(parts), font=dict(color="gray"))), margin=dict(t=100))
    fig.update_yaxes(autorange="reversed", dtick=1)
    fig.update_xaxes(dtick=1)
    fig.update_layout(height=520, width=620)
    return fig


def overhead_figure(results: list, title: str) -> go.Figure:
    """Grouped bars: the paired median overhead of each variant over the backbone, per setting
    (``results`` are :class:`adapterlab.latency.LatencyResult`); hover shows the median milliseconds."""
    fig = go.Figure()
    for result, color in zip(results, itertools.cycle(LEVEL_COLORS)):
        rows = result.rows()
        fig.add_bar(x=[row["variant"] for row in rows], y=[row["overhead_percent"] for row in rows],
                    name=result.label, marker_color=color,
                    text=[f"{row['overhead_percent']:+.1f} %" for row in rows], textposition="outside",
                    customdata=[[row["median_ms"]] for row in rows],
                    hovertemplate="%{x}: %{y:+.1f} %<br>median %{customdata[0]:.2f} ms<extra></extra>")
    fig.update_layout(barmode="group")
    return _layout(fig, title, "model", "time over the backbone alone (%, paired median)")


# ---------------------------------------------------------------- the trade-off figures (lab 10)

NOTE_CHARS = 80  # a note under a figure's title is broken into lines this long (at the deck's font size, 110 ran off the slide)


def tradeoff_figure(points: list[Point], title: str, baseline: tuple[str, float] | None = None,
                    note: str = "") -> go.Figure:
    """The dev metric (mean ± sample std over seeds, each seed a faint dot) against trained parameters (log),
    one trace per family; points without stored runs are left out (lab 10)."""
    shown = [p for p in points if p.row.n]
    metric = next((p.row.metric for p in shown if p.row.metric), "accuracy")
    fig = go.Figure()
    families = list(dict.fromkeys(p.family for p in points))
    for family, (color, symbol, dash) in zip(families, _styles(families)):
        members = sorted((p for p in shown if p.family == family), key=lambda p: p.trained)
        if not members:
            continue
        fig.add_scatter(
            x=[p.trained for p in members], y=[p.row.mean for p in members], name=family,
            mode="lines+markers" if len(members) > 1 else "markers", marker=dict(size=12, color=color, symbol=symbol),
            line=dict(color=color, dash=dash), text=[str(p.label) for p in members],
            error_y=dict(type="data", array=[0.0 if p.row.n < 2 else p.row.std for p in members], visible=True),
            hovertemplate="%{text}: %{y:.3f}<br>%{x:,} trained parameters<extra></extra>")
        seeds = [(p.trained, value) for p in members for value in p.row.values]
        fig.add_scatter(x=[x for x, _ in seeds], y=[y for _, y in seeds], mode="markers", showlegend=False,
                        marker=dict(size=5, color=color, opacity=0.35), hoverinfo="skip")
    if baseline is not None:
        fig.add_hline(y=baseline[1], line_dash="dot", line_color="gray", annotation_text=baseline[0],
                      annotation_position="bottom right")
    fig = _layout(fig, title, "trained parameters (log)", METRIC_AXES.get(metric, metric), log_x=True)
    _legend_below(fig)
    if note:  # under the title, where nothing else is drawn (below the plot it covered the x-axis title)
        lines = textwrap.wrap(note, NOTE_CHARS)
        fig.update_layout(title=dict(subtitle=dict(text="<br>".join(lines), font=dict(color="gray"))),
                          margin=dict(t=80 + 24 * len(lines)))
    fig.update_layout(height=560)
    return fig


def validation_curves_figure(curves: dict[str, list[tuple[int, float]]], metric: str, title: str) -> go.Figure:
    """Each tuned run's validation score at every evaluation (label → [(step, score)]): whether it flattened
    before the run ended (lab 10). Labels without a stored curve are left out."""
    fig = go.Figure()
    stored = {label: curve for label, curve in curves.items() if curve}
    for (label, curve), (color, symbol, dash) in zip(stored.items(), _styles(stored)):
        fig.add_scatter(x=[step for step, _ in curve], y=[score for _, score in curve], mode="lines+markers",
                        name=label, line=dict(color=color, dash=dash), marker=dict(color=color, symbol=symbol, size=9))
    fig = _layout(fig, title, "training step", METRIC_AXES.get(metric, metric).replace("dev ", "validation ", 1))
    _legend_below(fig)
    fig.update_layout(height=520)
    return fig


def curve_figure(curves: dict[str, list[tuple[float, SeedRow]]], title: str, x_title: str,
                 mark: tuple[float, SeedRow] | None = None) -> go.Figure:
    """Mean ± spread against one setting on a log axis, one line per curve (label → [(x, row)]), each seed a
    faint dot; ``mark`` (x, row), e.g. the knee, is circled. Rows without stored runs are left out (lab 10)."""
    fig = go.Figure()
    ticks, metric = set(), "accuracy"
    for (label, pairs), (color, symbol, dash) in zip(curves.items(), _styles(curves)):
        done = [(x, row) for x, row in pairs if row.n]
        ticks |= {x for x, _ in done}
        metric = next((row.metric for _, row in done if row.metric), metric)
        fig.add_scatter(x=[x for x, _ in done], y=[row.mean for _, row in done], mode="lines+markers", name=label,
                        error_y=dict(type="data", array=[0.0 if row.n < 2 else row.std for _, row in done],
                                     visible=True), marker=dict(size=10, color=color, symbol=symbol),
                        line=dict(color=color, dash=dash))
        seeds = [(x, value) for x, row in done for value in row.values]
        fig.add_scatter(x=[x for x, _ in seeds], y=[y for _, y in seeds], mode="markers", showlegend=False,
                        marker=dict(size=5, color=color, opacity=0.35), hoverinfo="skip")
    if mark is not None:
        fig.add_scatter(x=[mark[0]], y=[mark[1].mean], mode="markers", name=f"knee: {mark[1].label}",
                        marker=dict(size=24, color="rgba(0,0,0,0)", line=dict(width=3, color=LINE_COLORS[3])))
    fig = _layout(fig, title, x_title, METRIC_AXES.get(metric, metric), log_x=True)
    if ticks:
        fig.update_xaxes(tickvals=sorted(ticks))
    return fig


def adapter_change_figure(tables: dict, title: str) -> go.Figure:
    """Heatmaps side by side, one per table (label → layers × 2 array: the adapter after attention and after
    the FFN), of ‖A(h) − h‖ / ‖h‖ on one shared log colour scale, each cell printed (lab 11)."""
    from plotly.subplots import make_subplots

    values = [float(v) for table in tables.values() for row in table for v in row if v == v and v > 0]
    low, high = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    fig = make_subplots(rows=1, cols=len(tables), subplot_titles=list(tables), shared_yaxes=True,
                        horizontal_spacing=0.04)
    for column, table in enumerate(tables.values(), 1):
        layers = list(range(len(table)))
        fig.add_trace(go.Heatmap(
            z=[[math.log10(v) if v > 0 else None for v in row] for row in table], x=["attention", "FFN"], y=layers,
            text=[[f"{float(v):.3f}" for v in row] for row in table], texttemplate="%{text}",
            zmin=low, zmax=high, colorscale="Viridis", showscale=column == len(tables),
            colorbar=dict(title="change", tickvals=list(range(low, high + 1)),
                          ticktext=[f"{10.0 ** k:g}" for k in range(low, high + 1)]),
            hovertemplate="layer %{y}, %{x}: %{text}<extra></extra>"), row=1, col=column)
    fig = _layout(fig, title, "", "layer")
    fig.update_yaxes(autorange="reversed", dtick=1, title=None)
    fig.update_yaxes(title="layer", row=1, col=1)
    fig.update_layout(height=460)
    return fig


def layer_importance_figure(points: dict, metric: str = "dev score") -> go.Figure:
    """Per task (label → (change per layer, importance per layer)), each layer a labelled point: how far its
    adapters move the hidden state against how much the dev score drops with them off (lab 11)."""
    fig = go.Figure()
    for (label, (change, importance)), color in zip(points.items(), TASK_COLORS):
        fig.add_scatter(x=[float(v) for v in change], y=[100 * float(v) for v in importance], name=label,
                        mode="markers+text", text=[f"layer {i}" for i in range(len(change))], textposition="top center",
                        marker=dict(size=12, color=color), textfont=dict(color=color))
    fig.add_hline(y=0, line_dash="dot", line_color="gray")
    highest = max(100 * float(v) for _, importance in points.values() for v in importance)
    fig.update_yaxes(range=[min(-1.0, -0.1 * highest), 1.2 * highest])  # room for the top point's label
    fig = _layout(fig, "Where the work is done: each layer's change against its ablation",
                  "relative change ‖A(h) − h‖ / ‖h‖ (trained, mean of the layer's two adapters)",
                  f"{metric} lost with that layer's adapters off (points)")
    _legend_below(fig)
    fig.update_layout(height=520)
    return fig
