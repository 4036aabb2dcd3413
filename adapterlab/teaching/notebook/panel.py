"""The training panel of the SST-2 and CoLA labs: pick r, init scale, placement, learning rate and
steps, press Train, watch the curves, compare every run in a table.

The panel starts at the reference runs' settings where its runs can be theirs (300 steps on the stand-in),
so that the first press of Train shows a stored run. Its status line says what happens (looking up,
loading, training with the step reached and a progress bar), and where the page was reloaded the cell's
text says to run it again to get the panel back.

The panel holds no training logic: :meth:`TrainingPanel.train_once` turns the controls into a
:class:`adapterlab.training.TrainConfig` and looks it up in the run store (:mod:`adapterlab.runstore`:
the student's own runs, then the reference runs shipped with the labs). A stored run is shown at once,
marked as stored, with a *Train again* button to check it; otherwise
:func:`adapterlab.training.run_experiment` trains it, its callback redrawing the chart at every
evaluation, and the finished run is stored. The controls are plain attributes
(``panel.bottleneck.value = 8``, ``panel.train_button.click()``) so that a test can drive the panel
without a browser.

The panel starts at fp32, the precision of the reference runs, so that their settings answer at once; its
precision menu offers "auto" and bf16 to train faster where the CPU computes bf16 fast
(:mod:`adapterlab.precision`), and every run's row and status line say its precision. The panel keeps the
backbone and the tokenized data loaded between runs (:meth:`TrainingPanel.load`): each run trains a copy.

The chart is an ``ipywidgets.Output`` holding plotly's JSON output (rendered by JupyterLab's plotly
extension), not a plotly ``FigureWidget``: that one needs the ``anywidget`` package, which the lab
does not otherwise need.
"""

from __future__ import annotations

import copy
import dataclasses
import html

import ipywidgets as widgets
from tqdm.auto import tqdm

from .plots import display_data, training_figure
from .widgets import reloadable
from ... import methods
from ...runs.reference import REFERENCE_BACKBONE, REFERENCE_CONFIG, SEEDS
from ...training.precision import check_precision
from .profiles import current_profile
from ...runs.store import default_stores, history_of, precision_for, run_or_load
from ...training import TrainConfig, load_experiment, run_experiment

#: The precision menu: fp32 first, the precision of the reference runs the panel reads.
PRECISION_CHOICES = (
    ("fp32 (as the reference runs)", "fp32"),
    ("auto: bf16 where faster here", "auto"),
    ("bf16 (autocast)", "bf16"),
)
#: Bottleneck sizes the slider offers (powers of two, as in the paper's sweep up to 256).
BOTTLENECKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: The settings the r slider sets: an adapter's bottleneck, LoRA's rank.
SIZE_SETTINGS = ("bottleneck", "lora_rank")


def method_choices() -> list[tuple[str, str]]:
    """The methods the placement menu offers: every registered method that adds something small or trains
    little (full fine-tuning and the top-k layers train too long for a panel run), with its label."""
    return [(method.label, method.name) for method in methods.REGISTRY.values() if method.name not in ("full", "top_k")]


def _reads(method: str, setting: str) -> bool:
    return setting in methods.get(method).settings


class TrainingPanel:
    """Controls, a Train button, a live chart and a table of every run, for one task.

    ``task``, ``backbone``, ``data_dir``, ``max_train``, ``max_eval`` and ``fallback`` go to
    :func:`run_experiment` unchanged; ``backbone``, the data sizes and ``steps`` default to the
    current profile (``ADAPTERLAB_PROFILE``). ``config`` holds every training setting the panel does
    not show (batch size, warmup, seed, ...); ``precision`` is where the precision menu starts (fp32: the
    reference runs' precision). Display the panel by leaving it last in a cell.
    """

    def __init__(
        self,
        task: str = "sst2",
        backbone: str | None = None,
        data_dir=None,
        max_train: int | None = None,
        max_eval: int | None = None,
        fallback: bool | None = None,
        config: TrainConfig | None = None,
        steps: int | None = None,
        stores=None,
        precision: str = "fp32",
    ):
        profile = current_profile()
        self.task = task
        self.backbone = profile.backbone if backbone is None else backbone
        self.fallback = profile.fallback if fallback is None else fallback
        self.data_dir = data_dir
        self.max_train = profile.max_train if max_train is None else max_train
        self.max_eval = profile.max_eval if max_eval is None else max_eval
        self.config = config or TrainConfig(batch_size=profile.batch_size, seed=profile.seed,
                                            eval_every=profile.panel_eval_every, train_pooler=profile.train_pooler)
        if steps is None:
            steps = REFERENCE_CONFIG.max_steps if self._reference_sized(profile, backbone) else profile.panel_steps
        self.stores = default_stores() if stores is None else list(stores)
        self.runs: list[dict] = []
        self.figure = None
        self.last_result = None
        self.last_record = None
        self._loaded = {}  # the backbone and data each (task, backbone, data, sizes, seed) loaded, kept pristine

        look = dict(style={"description_width": "8em"}, layout={"width": "26em"})
        slider = dict(look, continuous_update=False)
        self.placement = widgets.Dropdown(options=method_choices(), value="houlsby", description="placement", **look)
        self.bottleneck = widgets.SelectionSlider(options=BOTTLENECKS, value=64, description="bottleneck r", **slider)
        self.init_scale = widgets.FloatLogSlider(
            value=1e-2, base=10, min=-7, max=0, step=0.5, readout_format=".0e", description="init scale σ", **slider
        )
        self.learning_rate = widgets.FloatLogSlider(
            value=1e-3, base=10, min=-5, max=-2, step=0.25, readout_format=".0e", description="learning rate", **slider
        )
        self.steps = widgets.IntSlider(
            value=steps, min=10, max=max(2000, steps), step=10, description="steps", **slider
        )
        self.precision = widgets.Dropdown(options=PRECISION_CHOICES, value=check_precision(precision),
                                          description="precision", **look)
        self.train_button = widgets.Button(description="Train", button_style="primary", icon="play")
        self.retrain_button = widgets.Button(description="Train again", icon="refresh", disabled=True,
                                             tooltip="re-train these settings instead of showing the stored run")
        self.status = widgets.HTML(value="Choose the settings and press <b>Train</b>.")
        self.progress = widgets.IntProgress(value=0, min=0, max=1, layout={"visibility": "hidden", "width": "20em"})
        self.log = widgets.Output()  # the run's progress bar and what it loaded
        self.chart = widgets.Output(layout={"min_height": "360px"})
        self.table = widgets.HTML(value=self._table_html())
        self.train_button.on_click(lambda _: self.train_once())
        self.retrain_button.on_click(lambda _: self.train_once(retrain=True))
        self.placement.observe(self._placement_changed, names="value")
        controls = widgets.VBox(
            [self.placement, self.bottleneck, self.init_scale, self.learning_rate, self.steps, self.precision],
            layout={"flex": "0 0 auto", "width": "28em"},  # the sliders keep their width and readouts
        )
        buttons = widgets.HBox([self.train_button, self.retrain_button])
        actions = widgets.VBox([buttons, self.status, self.progress, self.log], layout={"flex": "1 1 auto"})
        self.widget = widgets.VBox([widgets.HBox([controls, actions]), self.chart, self.table])

    def _repr_mimebundle_(self, **kwargs):
        bundle = reloadable(self.widget._repr_mimebundle_(**kwargs), "The training panel")
        return {**bundle, "text/plain": bundle["text/plain"] + " Its runs are kept: the same settings show at once."}

    def _reference_sized(self, profile, backbone: str | None) -> bool:
        """Whether this panel's runs have the reference runs' settings but for the controls (their backbone,
        all of the data, their batch size, pooler and a seed of theirs): then the steps start at the
        reference runs' count, so that the first press of Train shows a stored run at once."""
        loads = profile.sized_for if backbone is None else backbone
        reference = REFERENCE_CONFIG
        return (loads == REFERENCE_BACKBONE and self.max_train is None and self.max_eval is None
                and self.config.batch_size == reference.batch_size and self.config.train_pooler == reference.train_pooler
                and self.config.seed in SEEDS and self.config.eval_every in (None, reference.eval_every))

    def _placement_changed(self, change) -> None:
        # A method without a size or an init scale (the head alone, BitFit) leaves those controls off.
        self.bottleneck.disabled = not any(_reads(change["new"], name) for name in SIZE_SETTINGS)
        self.init_scale.disabled = not _reads(change["new"], "init_scale")

    def settings(self) -> TrainConfig:
        """The TrainConfig the controls describe now."""
        return dataclasses.replace(
            self.config,
            method=self.placement.value,
            **{name: self.bottleneck.value for name in SIZE_SETTINGS if _reads(self.placement.value, name)},
            init_scale=self.init_scale.value,
            learning_rate=self.learning_rate.value,
            max_steps=self.steps.value,
            precision=self.precision.value,
            # Unless the config says otherwise, evaluate halfway and at the end: the chart moves
            # during the run, and evaluations stay a small share of its time.
            eval_every=self.config.eval_every or max(self.steps.value // 2, 1),
        )

    def load(self, task, backbone, data_dir, max_train, max_eval, fallback, seed, validation_rows=None):
        """:func:`adapterlab.training.load_experiment`, loaded once per set of arguments and kept: every call
        returns the data and a fresh copy of the backbone as it was loaded (training changes the copy)."""
        key = (getattr(task, "name", task), backbone, str(data_dir), max_train, max_eval, fallback, seed, validation_rows)
        if key not in self._loaded:
            split = {} if validation_rows is None else {"validation_rows": validation_rows}
            self._loaded[key] = load_experiment(task, backbone, data_dir, max_train, max_eval, fallback, seed, **split)
        pristine = self._loaded[key]
        return dataclasses.replace(pristine, model=copy.deepcopy(pristine.model))

    def _resolved(self, config: TrainConfig) -> TrainConfig:
        """``config`` with "auto" replaced by the precision it trains in here (probed once, on the kept backbone)."""
        def load():
            return self.load(self.task, self.backbone, self.data_dir, self.max_train, self.max_eval, self.fallback,
                             config.seed).model

        choice = precision_for(self.task, config, backbone=self.backbone, fallback=self.fallback, load=load)
        return dataclasses.replace(config, precision=choice.precision)

    def _show(self, history) -> None:
        self.figure = training_figure(history)
        self.chart.outputs = (display_data(self.figure),)

    def _say(self, text: str, done: int | None = None, total: int | None = None) -> None:
        """The status line, and the progress bar under it (hidden when ``total`` is None)."""
        self.status.value = text
        self.progress.layout.visibility = "hidden" if total is None else "visible"
        if total is not None:
            self.progress.max, self.progress.value = total, done or 0

    def _watched(self, number: int, config: TrainConfig):
        """The loader, trainer and callback of run ``number``, each saying in the status line what happens now:
        loading, training (the bar moves at each evaluation; the bar in the log below counts every step)."""
        total = config.max_steps

        def loader(*args, **kwargs):
            self._say(f"Run {number} is not stored: loading the backbone and the data (once per panel) …", 0, total)
            return self.load(*args, **kwargs)

        def trainer(*args, **kwargs):
            self._say(f"Training run {number} ({config.method}, {total} steps): starting …", 0, total)
            return run_experiment(*args, **kwargs)

        def callback(history) -> None:
            self._show(history)
            step = history.steps[-1] if history.steps else 0
            score = history.evals[-1].get(history.metric) if history.evals else None
            so_far = f"; dev {history.metric} {score:.3f} so far" if score is not None else ""
            self._say(f"Training run {number} ({config.method}): step {step} of {total}{so_far} …", step, total)

        return loader, trainer, callback

    def train_once(self, retrain: bool = False):
        """Show the stored run with the current settings, or train it (``retrain``: train even when stored);
        update chart, table and status. Returns the TrainResult of a run trained now, else None (a stored
        run, or a diverged one: the status line then says why). ``last_record`` holds the run either way."""
        config = self.settings()
        self.train_button.disabled = self.retrain_button.disabled = True
        self._say(f"Looking for a stored run {len(self.runs) + 1} with these settings ({config.method}) …")
        self.log.clear_output()
        loader, trainer, callback = self._watched(len(self.runs) + 1, config)
        try:
            with self.log:
                found = run_or_load(self.task, config, backbone=self.backbone, data_dir=self.data_dir,
                                    max_train=self.max_train, max_eval=self.max_eval, fallback=self.fallback,
                                    stores=self.stores, retrain=retrain, callback=callback,
                                    trainer=trainer, loader=loader)
        finally:
            self.train_button.disabled = False
            self.progress.layout.visibility = "hidden"
        record, number = found.record, len(self.runs) + 1
        self.last_record, self.last_result = record, found.result
        self.retrain_button.disabled = not found.stored
        self.runs.append(self._row(config, record, stored=found.stored))
        self.table.value = self._table_html()
        if record.get("status") == "diverged":
            self.status.value = f"<span style='color:#b00'>Run {number} diverged: {html.escape(record['error'])}</span>"
            return None
        self._show(found.result.history if found.result is not None else history_of(record))
        if found.stored:
            self.status.value = (f"Run {number}: <b>stored result</b> of these settings, trained {record['created'][:10]} "
                                 f"in {record['key']['precision']} on {record['machine']['cpus']} CPUs "
                                 f"({html.escape(record['backbone_info'] or '')}); "
                                 "press <b>Train again</b> to check it")
            return None
        interrupted = " (stopped early)" if found.result.interrupted else ""
        self.status.value = (f"Run {number} finished{interrupted} in {record['key']['precision']}: "
                             f"{html.escape(found.result.backbone_info.describe())}")
        return found.result

    def sweep(self, control: str, values, steps: int | None = None) -> list[dict]:
        """Move one control through ``values``, pressing Train at each; return the rows of those runs.

        ``control`` is "placement", "bottleneck", "init_scale", "learning_rate" or "steps"; ``steps``
        sets the steps slider first. The control goes back to its value afterwards. A value whose
        settings equal an earlier run's (trained here or added with :meth:`record`) reuses that run's
        row instead of training again: with the same seed it would give the same numbers, and on a
        laptop a run of bert-base costs minutes. This is how a lab makes the static snapshot of the
        panel that a slide deck shows (widgets need a live kernel).
        """
        controls = {"placement": self.placement, "bottleneck": self.bottleneck, "init_scale": self.init_scale,
                    "learning_rate": self.learning_rate, "steps": self.steps}
        if control not in controls:
            raise ValueError(f"control must be one of {', '.join(controls)}; got {control!r}")
        if steps is not None:
            self.steps.value = steps
        widget, before, rows = controls[control], controls[control].value, []
        try:
            for value in tqdm(list(values), desc=f"sweep over {control}", unit="run"):
                widget.value = value
                earlier = self._earlier_run(self._resolved(self.settings()))
                if earlier is None:
                    self.train_once()
                    earlier = self.runs[-1]
                rows.append(earlier)
        finally:
            widget.value = before
        return rows

    def record(self, config: TrainConfig, result) -> dict:
        """Add a run trained outside the panel (a :func:`run_experiment` result with the panel's task,
        backbone and data) to the table, so that a sweep can reuse it. Returns its row."""
        if result.history.task and result.history.task != self.task:
            raise ValueError(f"this panel trains {self.task!r}; the run to record trained {result.history.task!r}")
        self.runs.append(self._row(config, _result_record(result)))
        self.table.value = self._table_html()
        return self.runs[-1]

    def _earlier_run(self, config: TrainConfig) -> dict | None:
        key = _settings_key(config)
        return next((row for row in self.runs if row["key"] == key and row["value"] is not None), None)

    def _row(self, config: TrainConfig, record: dict, stored: bool = False) -> dict:
        size = next((getattr(config, name) for name in SIZE_SETTINGS if _reads(config.method, name)), None)
        row = {
            "run": len(self.runs) + 1,
            "placement": config.method,
            "bottleneck": size,
            "init_scale": config.init_scale if _reads(config.method, "init_scale") else None,
            "learning_rate": config.learning_rate,
            "steps": config.max_steps,
            "precision": record["key"]["precision"] if "key" in record else record["precision"],
            "stored": stored,
        }
        row["key"] = _settings_key(dataclasses.replace(config, precision=row["precision"]))
        if record.get("status") == "diverged":
            return {**row, "metric": "diverged", "value": None, "trained": None, "percent": None, "seconds": None}
        return {
            **row,
            "metric": record["metric"],
            "value": record["best_metric"],  # None when stopped before the first evaluation
            "trained": record["trained_parameters"],
            "percent": record["percent_of_backbone"],
            "seconds": record["train_seconds"],
        }

    def _table_html(self) -> str:
        headers = ["run", "placement", "r", "init scale", "learning rate", "steps", "dev metric", "trained params",
                   "% of backbone", "train time", "precision", "from"]
        if not self.runs:
            body = f"<tr><td colspan='{len(headers)}'><i>no runs yet</i></td></tr>"
        else:
            body = "".join(self._table_row(row) for row in self.runs)
        head = "".join(f"<th style='padding:2px 8px'>{h}</th>" for h in headers)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    @staticmethod
    def _table_row(row: dict) -> str:
        def fmt(value, pattern):
            return "–" if value is None else format(value, pattern)

        if row["value"] is None:
            metric = "diverged" if row["metric"] == "diverged" else "not evaluated"
        else:
            metric = f"{row['metric']} {row['value']:.3f}"
        cells = [
            str(row["run"]), row["placement"], fmt(row["bottleneck"], "d"), fmt(row["init_scale"], ".0e"),
            fmt(row["learning_rate"], ".0e"), str(row["steps"]), metric, fmt(row["trained"], ","),
            fmt(row["percent"], ".2f"), "–" if row["seconds"] is None else f"{row['seconds']:.1f} s",
            row["precision"],
            "store" if row["stored"] else "trained here",
        ]
        return "<tr>" + "".join(f"<td style='padding:2px 8px'>{html.escape(c)}</td>" for c in cells) + "</tr>"


def _settings_key(config: TrainConfig) -> tuple:
    """What decides a run's numbers: every setting except how it is shown (progress bar) and where it
    runs; the learning rate as the peak rate actually used (None means the method's default); the precision
    as the run resolved it (fp32 or bf16)."""
    settings = config.as_dict()
    for ignored in ("progress", "device", "learning_rate"):
        settings.pop(ignored)
    return tuple(sorted(settings.items()))


def _result_record(result) -> dict:
    """The fields of a stored run that the table shows, from a TrainResult trained outside the panel."""
    return {"metric": result.history.metric, "best_metric": result.best_metric,
            "trained_parameters": result.trainable["total_trainable"],
            "percent_of_backbone": result.trainable["percent_of_backbone"], "train_seconds": result.train_seconds,
            "precision": result.config.precision}
