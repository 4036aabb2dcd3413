"""Plotly figures for the labs. Presentation only: every number comes from the caller.

Each function takes the columns another module computed and returns a ``go.Figure`` with a title,
axis titles and units. :func:`setup_notebook` makes a notebook store each figure as plotly's JSON
output only (no copy of plotly.js per cell), which keeps committed notebooks small; a slide deck
embeds plotly.js once.
"""

from __future__ import annotations

import json

import plotly.graph_objects as go
import plotly.io as pio

from .adapter import ORIGINAL_CODE_INIT_SCALE, PAPER_INIT_SCALE

TEMPLATE = "plotly_white"
COLORS = {"frozen": "#d9d9d9", "adapter": "#f28e2b", "layernorm": "#a0c4e8", "head": "#59a14f", "io": "#ffffff"}
LINE_COLORS = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#b07aa1"]


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


def _layout(fig: go.Figure, title: str, x: str, y: str, log_x: bool = False, log_y: bool = False) -> go.Figure:
    fig.update_layout(
        title=title, template=TEMPLATE, height=420, margin=dict(l=70, r=30, t=70, b=60),
        legend=dict(bgcolor="rgba(255,255,255,0.7)"), font=dict(size=14),
    )
    fig.update_xaxes(title=x, type="log" if log_x else "linear", exponentformat="power")
    fig.update_yaxes(title=y, type="log" if log_y else "linear", exponentformat="power")
    return fig


def _mark_init_scales(fig: go.Figure) -> None:
    fig.add_vline(x=ORIGINAL_CODE_INIT_SCALE, line_dash="dot", line_color="gray",
                  annotation_text="1e-3: original code", annotation_position="top left")
    fig.add_vline(x=PAPER_INIT_SCALE, line_dash="dash", line_color="gray",
                  annotation_text="1e-2: paper", annotation_position="top right")


def model_deviation_figure(sweep: dict, backbone: str) -> go.Figure:
    """A whole model's last-hidden-state deviation and max |Δlogit| against the adapters' init scale."""
    fig = go.Figure()
    fig.add_scatter(x=sweep["init_scale"], y=sweep["hidden_deviation"], mode="lines+markers",
                    name="‖ΔH‖ / ‖H‖, last hidden state", line_color=LINE_COLORS[0])
    fig.add_scatter(x=sweep["init_scale"], y=sweep["max_logit_change"], mode="lines+markers",
                    name="max |Δlogit|", line_color=LINE_COLORS[3])
    _mark_init_scales(fig)
    return _layout(fig, f"How far adapters move {backbone} at step zero", "init scale σ (log)",
                   "change (relative, or logit units; log)", log_x=True, log_y=True)


def init_scale_figure(sweep: dict, current: dict | None = None) -> go.Figure:
    """One adapter: deviation (measured and small-σ theory) and step-zero gradient norms against σ."""
    fig = go.Figure()
    series = [
        ("deviation", "‖A(h) − h‖ / ‖h‖ (measured)", "solid"),
        ("predicted", "σ² theory: ½·v·σ²·√(rd)", "dash"),
        ("grad_up", "‖∂L/∂W_up‖", "solid"),
        ("grad_down", "‖∂L/∂W_down‖", "solid"),
    ]
    for (key, name, dash), color in zip(series, LINE_COLORS):
        fig.add_scatter(x=sweep["init_scale"], y=sweep[key], mode="lines", name=name, line=dict(color=color, dash=dash))
    if current is not None:
        keys = ["deviation", "grad_up", "grad_down"]
        fig.add_scatter(x=[current["init_scale"]] * 3, y=[current[k] for k in keys], mode="markers",
                        marker=dict(size=12, color="black", symbol="circle-open", line_width=2),
                        name=f"σ = {current['init_scale']:.1e}")
    _mark_init_scales(fig)
    return _layout(fig, "One adapter at step zero: deviation grows like σ², gradients like σ",
                   "init scale σ (log)", "value (dimensionless; log)", log_x=True, log_y=True)


def singular_values_figure(values: dict, bottleneck: int) -> go.Figure:
    """Singular values (log) of one or more matrices, e.g. W_up W_down for a linear adapter."""
    fig = go.Figure()
    for (name, s), color in zip(values.items(), LINE_COLORS):
        s = [max(float(v), 1e-30) for v in s]
        fig.add_scatter(x=list(range(1, len(s) + 1)), y=s, mode="markers", name=name, marker_color=color)
    fig.add_vline(x=bottleneck + 0.5, line_dash="dash", line_color="gray", annotation_text=f"r = {bottleneck}")
    return _layout(fig, "Singular values of M − I: at most r are non-zero", "index (largest first)",
                   "singular value (log)", log_y=True)


def linear_fit_figure(sweep: dict) -> go.Figure:
    """Relative residual of the best affine fit of an adapter's correction, per activation, against σ."""
    fig = go.Figure()
    for (name, residuals), color in zip(sweep["residual"].items(), LINE_COLORS):
        fig.add_scatter(x=sweep["init_scale"], y=[max(r, 1e-17) for r in residuals], mode="lines+markers",
                        name=name, line_color=color)
    return _layout(fig, "What the best linear map misses of an adapter's correction",
                   "weight scale σ (log)", "relative residual ‖fit − Δ‖ / ‖Δ‖ (log)", log_x=True, log_y=True)


def latency_figure(seconds: dict, title: str) -> go.Figure:
    """A bar per variant: median milliseconds per forward pass."""
    names = list(seconds)
    fig = go.Figure(go.Bar(x=names, y=[1e3 * seconds[n] for n in names], marker_color=LINE_COLORS[: len(names)],
                           text=[f"{1e3 * seconds[n]:.1f} ms" for n in names], textposition="outside"))
    return _layout(fig, title, "model", "median time per forward pass (ms)")


def counts_figure(curves: dict, current: tuple[str, int, int] | None = None, backbone: str = "") -> go.Figure:
    """Trainable parameters against the bottleneck r, one line per placement.

    ``curves`` maps a placement to {"bottleneck": [...], "trainable": [...]}; ``current`` is
    (placement, r, trainable) to mark.
    """
    fig = go.Figure()
    for (name, curve), color in zip(curves.items(), LINE_COLORS):
        fig.add_scatter(x=curve["bottleneck"], y=[t / 1e6 for t in curve["trainable"]], mode="lines+markers",
                        name=name, line_color=color)
    if current is not None:
        placement, r, trainable = current
        fig.add_scatter(x=[r], y=[trainable / 1e6], mode="markers", name=f"{placement}, r = {r}",
                        marker=dict(size=14, color="black", symbol="circle-open", line_width=2))
    return _layout(fig, f"Trainable parameters per task{', ' + backbone if backbone else ''}",
                   "bottleneck r (log)", "trainable parameters (millions; log)", log_x=True, log_y=True)


def trainable_bars_figure(rows: dict, title: str) -> go.Figure:
    """Stacked bars: for each variant (key), trainable parameters per group (adapters, LayerNorms, head)."""
    fig = go.Figure()
    for group, color in (("adapters", COLORS["adapter"]), ("layernorm", COLORS["layernorm"]), ("head", COLORS["head"])):
        fig.add_bar(x=list(rows), y=[rows[v][group] for v in rows], name=group, marker_color=color)
    fig.update_layout(barmode="stack")
    return _layout(fig, title, "placement", "trainable parameters")


# --------------------------------------------------------------------------------------------------
# A BERT layer, drawn
# --------------------------------------------------------------------------------------------------

#: (label, kind) from bottom to top: one BERT layer; "A1"/"A2" mark where a serial adapter may go.
_LAYER = [
    ("hidden states in", "io"),
    ("multi-head attention", "frozen"),
    ("dense (attention output)", "frozen"),
    ("A1", "slot"),
    ("add & LayerNorm", "layernorm"),
    ("FFN in: d → 4d, GELU", "frozen"),
    ("FFN out: 4d → d", "frozen"),
    ("A2", "slot"),
    ("add & LayerNorm", "layernorm"),
    ("hidden states out", "io"),
]
_SLOTS = {"houlsby": {"A1", "A2"}, "pfeiffer": {"A2"}, "parallel": set()}
_BOX_W, _BOX_H = 2.0, 0.6


def _box(fig, x, y, label, color, width=_BOX_W, dash=None):
    fig.add_shape(type="rect", x0=x - width / 2, x1=x + width / 2, y0=y - _BOX_H / 2, y1=y + _BOX_H / 2,
                  fillcolor=color, line=dict(color="#555", dash=dash), layer="below")
    fig.add_annotation(x=x, y=y, text=label, showarrow=False, font=dict(size=12))


def _arrow(fig, x0, y0, x1, y1, color="#555"):
    fig.add_annotation(x=x1, y=y1, ax=x0, ay=y0, xref="x", yref="y", axref="x", ayref="y", text="",
                       showarrow=True, arrowhead=2, arrowwidth=1.4, arrowcolor=color)


def _residual(fig, x, y_from, y_to):
    """The skip connection: from a sublayer's input, round the left, into its add & LayerNorm."""
    left = x - _BOX_W / 2 - 0.35
    fig.add_shape(type="path", path=f"M {x - _BOX_W / 2},{y_from} L {left},{y_from} L {left},{y_to}",
                  line=dict(color="#999", dash="dot"))
    _arrow(fig, left, y_to, x - _BOX_W / 2, y_to, color="#999")


def placement_diagram(train_layernorm: bool = True) -> go.Figure:
    """Houlsby, Pfeiffer and parallel adapters inside one BERT layer, side by side.

    Orange: adapters (trained); blue: LayerNorms (trained when train_layernorm, else grey); grey:
    frozen pretrained weights; dotted: residual connections. Drawn bottom to top like the paper.
    """
    fig = go.Figure()
    ln_color = COLORS["layernorm"] if train_layernorm else COLORS["frozen"]
    ys = {i: float(i) for i in range(len(_LAYER))}
    for column, placement in enumerate(("houlsby", "pfeiffer", "parallel")):
        x = 4.4 * column
        previous = None
        for i, (label, kind) in enumerate(_LAYER):
            if kind == "slot" and label not in _SLOTS[placement]:
                continue
            if kind == "slot":
                _box(fig, x, ys[i], "adapter (bottleneck r)", COLORS["adapter"])
            else:
                color = ln_color if kind == "layernorm" else COLORS[kind]
                _box(fig, x, ys[i], label, color, dash="dot" if kind == "io" else None)
            if previous is not None:
                _arrow(fig, x, ys[previous] + _BOX_H / 2, x, ys[i] - _BOX_H / 2)
            previous = i
        _residual(fig, x, ys[0], ys[4])
        _residual(fig, x, ys[4], ys[8])
        if placement == "parallel":
            y_mid = (ys[5] + ys[6]) / 2
            side = x + _BOX_W / 2 + 0.9
            _box(fig, side, y_mid, "adapter × s", COLORS["adapter"], width=1.4)
            _arrow(fig, x + 0.5, ys[4] + _BOX_H / 2, side, y_mid - _BOX_H / 2)
            _arrow(fig, side, y_mid + _BOX_H / 2, x + 0.5, ys[8] - _BOX_H / 2)
        fig.add_annotation(x=x, y=len(_LAYER) - 0.3, text=f"<b>{placement}</b>", showarrow=False, font=dict(size=16))
    legend = (("adapter (trained)", COLORS["adapter"]),
              (f"LayerNorm ({'trained' if train_layernorm else 'frozen'})", ln_color), ("frozen", COLORS["frozen"]))
    for name, color in legend:
        fig.add_scatter(x=[None], y=[None], mode="markers", name=name, marker=dict(size=14, symbol="square", color=color))
    fig.update_xaxes(visible=False, range=[-1.7, 11.8])
    fig.update_yaxes(visible=False, range=[-0.6, len(_LAYER)])
    fig.update_layout(
        title="Where the adapters go in one BERT layer (dotted: residual connections)", template=TEMPLATE, height=640,
        margin=dict(l=10, r=10, t=60, b=10), font=dict(size=13), legend=dict(orientation="h", y=-0.02),
    )
    return fig
