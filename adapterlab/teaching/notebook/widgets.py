"""Live widgets for the labs. They hold no logic: each callback asks the package for numbers and
redraws a plotly figure and an HTML table.

Every widget is a :class:`Panel` (an ``ipywidgets.VBox``): its ``controls``, an ``Output`` showing
``figure`` (the last ``go.Figure`` drawn) and an ``HTML`` ``table``. ``panel.update()`` redraws
from the current control values; moving a control calls it. Tests drive a panel headless by setting
a control's ``.value`` and reading ``figure`` and ``table.value``.

The figure goes into an ``Output`` as plotly's JSON output rather than into a ``FigureWidget``,
which would need the extra ``anywidget`` package. Widgets do not run in a static slide deck: each lab
follows a widget with a static figure of a representative sweep.
"""

from __future__ import annotations

import html

import ipywidgets as widgets
import numpy as np

from ...model import counting

from . import plots

from . import probes
from ...model.placement import PLACEMENTS

#: σ grid of the init-scale explorer's curves: 1e-7 … 1, four points per decade.
EXPLORER_SCALES = [float(f"{s:.4g}") for s in np.logspace(-7, 0, 29)]
#: r grid of the counts explorer's curves.
COUNT_BOTTLENECKS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]


def reloadable(bundle: dict, what: str) -> dict:
    """A widget's display bundle whose plain-text part says how to get the widget back. JupyterLab shows that
    text where it cannot draw the widget (after the page is reloaded, or in a saved notebook without its
    kernel), instead of Python's ``VBox(children=...)``."""
    return {**bundle, "text/plain": f"{what} is a live widget: it shows while the notebook's kernel runs. After "
                                    "reloading the page, run this cell again to get it back."}


def html_table(header: list[str], rows: list[list]) -> str:
    """A small HTML table (numbers right-aligned)."""
    def cell(value, tag):
        align = "right" if isinstance(value, (int, float)) or str(value)[:1].isdigit() else "left"
        return f'<{tag} style="text-align:{align};padding:2px 10px">{html.escape(str(value))}</{tag}>'

    head = "".join(cell(h, "th") for h in header)
    body = "".join("<tr>" + "".join(cell(v, "td") for v in row) + "</tr>" for row in rows)
    return f'<table style="border-collapse:collapse;font-size:14px"><tr>{head}</tr>{body}</table>'


class Panel(widgets.VBox):
    """Controls above a figure and a table; ``update()`` redraws both through ``draw``."""

    def __init__(self, controls: dict, draw):
        self.controls = controls
        self.plot = widgets.Output(layout=widgets.Layout(width="64%"))
        self.table = widgets.HTML(layout=widgets.Layout(width="36%"))
        self.figure = None
        self._draw = draw
        super().__init__([widgets.HBox(list(controls.values())), widgets.HBox([self.plot, self.table])])
        for control in controls.values():
            control.observe(lambda _change: self.update(), names="value")
        self.update()

    def _repr_mimebundle_(self, **kwargs):
        return reloadable(super()._repr_mimebundle_(**kwargs), "This explorer")

    def update(self) -> None:
        values = {name: control.value for name, control in self.controls.items()}
        self.figure, self.table.value = self._draw(**values)
        self.plot.outputs = (plots.display_data(self.figure),)


def init_scale_explorer(h=None, delta=None, bottleneck: int = 64, initial: float = 1e-2) -> Panel:
    """Init scale σ (log slider, 1e-7 … 1) → one adapter's deviation ‖A(h) − h‖/‖h‖ and its step-zero
    gradient norms, against the whole sweep. ``h`` and ``delta`` (tokens × d) default to seeded
    random probes with d = 768."""
    if h is None or delta is None:
        h, delta = probes.probe_inputs(32, 768)
    sweep = probes.init_scale_sweep(EXPLORER_SCALES, h, delta, bottleneck)
    slider = widgets.FloatLogSlider(
        value=initial, base=10, min=-7, max=0, step=0.25, description="init σ", readout_format=".1e",
        continuous_update=False,
    )

    def draw(scale):
        point = probes.init_scale_probe(scale, h, delta, bottleneck)
        rows = [
            ["‖A(h) − h‖ / ‖h‖", f"{point['deviation']:.2e}"],
            ["small-σ theory", f"{point['predicted']:.2e}"],
            ["‖∂L/∂W_up‖ at step 0", f"{point['grad_up']:.2e}"],
            ["‖∂L/∂W_down‖ at step 0", f"{point['grad_down']:.2e}"],
        ]
        table = html_table([f"σ = {scale:.1e}, r = {bottleneck}, d = {h.shape[-1]}", "value"], rows)
        return plots.init_scale_figure(sweep, point), table

    return Panel({"scale": slider}, draw)


def counts_curves(backbone: str, train_layernorm: bool, bottlenecks=COUNT_BOTTLENECKS) -> dict:
    """Closed-form trainable counts against r for every placement (what the counts plot draws)."""
    config = counting.backbone_config(backbone)
    return {
        placement: {
            "bottleneck": list(bottlenecks),
            "trainable": [counting.bert_counts(config, placement, r, train_layernorm)["total_trainable"] for r in bottlenecks],
        }
        for placement in PLACEMENTS
    }


def counts_explorer(backbone: str = "bert-base", placement: str = "houlsby", bottleneck: int = 64) -> Panel:
    """Backbone, placement, r (slider) and the LayerNorm choice → closed form beside a module count
    (the model built on the meta device) and trainable parameters against r."""
    controls = {
        "backbone": widgets.Dropdown(options=list(counting.NAMED_CONFIGS), value=backbone, description="backbone"),
        "placement": widgets.Dropdown(options=list(PLACEMENTS), value=placement, description="placement"),
        "bottleneck": widgets.IntSlider(value=bottleneck, min=1, max=512, description="r", continuous_update=False),
        "train_layernorm": widgets.Checkbox(value=True, description="train LayerNorms"),
    }

    def draw(backbone, placement, bottleneck, train_layernorm):
        report = counting.compare_counts(backbone, placement, bottleneck, train_layernorm)
        rows = [[row.item, f"{row.closed_form:,.3f}" if isinstance(row.closed_form, float) else f"{row.closed_form:,}",
                 f"{row.counted:,.3f}" if isinstance(row.counted, float) else f"{row.counted:,}",
                 "yes" if row.match else "NO"] for row in report.rows]
        table = html_table(["item", "closed form", "counted (meta device)", "match"], rows)
        trainable = report.row("total_trainable").closed_form
        figure = plots.counts_figure(counts_curves(backbone, train_layernorm), (placement, bottleneck, trainable), backbone)
        return figure, table

    return Panel(controls, draw)
