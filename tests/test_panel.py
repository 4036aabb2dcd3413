"""The training panel, driven headless on the tiny random model and the project's toy data."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

import adapterlab.panel as panel_module
from adapterlab import profiles
from adapterlab.backbones import TINY, TINY_CONFIG
from adapterlab.data import TOY_DIR
from adapterlab.panel import TrainingPanel
from adapterlab.runs.reference import REFERENCE_BACKBONE, REFERENCE_CONFIG
from adapterlab.training import History, TrainConfig, TrainingDiverged

D, LAYERS, LABELS = TINY_CONFIG["hidden_size"], TINY_CONFIG["num_hidden_layers"], 2
# Trained by every method: the classifier (d×labels + labels); the pretrained pooler stays frozen by default.
HEAD = D * LABELS + LABELS
# Trained with adapters: two LayerNorms per layer and the embeddings' one, 2d each.
LAYERNORMS = (2 * LAYERS + 1) * 2 * D


def houlsby_trained(r: int) -> int:
    """Closed form: 2 adapters per layer of 2rd + r + d, plus LayerNorms and head."""
    return 2 * LAYERS * (2 * r * D + r + D) + LAYERNORMS + HEAD


@pytest.fixture
def panel():
    config = TrainConfig(batch_size=8, eval_batch_size=32, eval_every=5, seed=0)
    return TrainingPanel("sst2", backbone=TINY, data_dir=TOY_DIR, max_train=64, max_eval=32, config=config, steps=10)


def test_the_panel_starts_empty_with_its_controls(panel):
    assert panel.runs == [] and panel.figure is None and panel.chart.outputs == ()
    assert "no runs yet" in panel.table.value
    assert panel.bottleneck.value == 64 and panel.init_scale.value == pytest.approx(1e-2)
    assert (panel.init_scale.min, panel.init_scale.max) == (-7, 0)  # 1e-7 … 1 on a log slider
    assert panel.placement.value == "houlsby" and panel.steps.value == 10
    assert "application/vnd.jupyter.widget-view+json" in panel._repr_mimebundle_()


def test_pressing_train_runs_the_settings_and_fills_chart_and_table(panel):
    updates, disabled_while_training = [], []

    def on_chart(change):
        updates.append(change["new"])
        disabled_while_training.append(panel.train_button.disabled)

    panel.chart.observe(on_chart, names="outputs")
    panel.bottleneck.value = 8
    panel.init_scale.value = 1e-3
    panel.learning_rate.value = 3e-3
    panel.train_button.click()

    result = panel.last_result
    assert result is not None and result.config.bottleneck == 8
    assert result.config.init_scale == pytest.approx(1e-3) and result.config.learning_rate == pytest.approx(3e-3)
    assert len(result.history.steps) == 10
    # Redrawn at both evaluations (steps 5 and 10), while training.
    assert len(updates) == 2 and disabled_while_training == [True, True]
    assert not panel.train_button.disabled
    loss = next(trace for trace in panel.figure.data if "training loss" in trace.name)
    assert list(loss.y) == pytest.approx(result.history.loss)
    shown = updates[-1][0]["data"]["application/vnd.plotly.v1+json"]
    assert shown["data"][0]["y"] == pytest.approx(result.history.loss)
    json.dumps(shown)  # plain JSON, storable in a notebook

    (row,) = panel.runs
    assert (row["placement"], row["bottleneck"], row["steps"]) == ("houlsby", 8, 10)
    assert row["trained"] == houlsby_trained(8)
    assert row["value"] == result.best_metric
    assert panel.table.value.count("<tr>") == 2  # header + one run
    assert ">houlsby<" in panel.table.value and ">8<" in panel.table.value and "Run 1 finished" in panel.status.value


def test_runs_accumulate_and_head_only_disables_adapter_controls(panel):
    panel.train_once()
    panel.placement.value = "head"
    assert panel.bottleneck.disabled and panel.init_scale.disabled
    panel.train_button.click()
    assert [run["placement"] for run in panel.runs] == ["houlsby", "head"]
    assert panel.runs[0]["trained"] == houlsby_trained(64)
    assert panel.runs[1]["trained"] == HEAD and panel.runs[1]["bottleneck"] is None
    assert panel.table.value.count("<tr>") == 3
    panel.placement.value = "pfeiffer"
    assert not panel.bottleneck.disabled


def test_a_diverged_run_is_reported_and_the_button_comes_back(panel, monkeypatch):
    def diverge(task, config, **kwargs):
        raise TrainingDiverged(7, float("nan"), 0.5, config, History())

    monkeypatch.setattr(panel_module, "run_experiment", diverge)
    panel.init_scale.value = 1.0
    assert panel.train_once() is None
    assert not panel.train_button.disabled
    assert panel.runs[0]["metric"] == "diverged" and "diverged" in panel.table.value
    assert panel.table.value.count("diverged") == 1  # only in that row: a browser test looks for the word
    assert "step 7" in panel.status.value and "init_scale" in panel.status.value


def test_a_sweep_moves_one_control_presses_train_at_each_value_and_puts_it_back(panel, monkeypatch):
    seen = []

    def record(task, config, **kwargs):
        seen.append((config.bottleneck, config.max_steps))
        raise TrainingDiverged(1, float("inf"), 0.1, config, History())

    monkeypatch.setattr(panel_module, "run_experiment", record)
    rows = panel.sweep("bottleneck", [2, 16], steps=20)
    assert seen == [(2, 20), (16, 20)]
    assert [row["bottleneck"] for row in rows] == [2, 16] and rows == panel.runs
    assert panel.bottleneck.value == 64 and panel.steps.value == 20
    with pytest.raises(ValueError, match="control must be one of"):
        panel.sweep("dropout", [0.1])


def test_settings_follow_the_controls_and_evaluate_halfway_unless_told():
    panel = TrainingPanel("cola", backbone=TINY, data_dir=TOY_DIR, config=TrainConfig(batch_size=4), steps=40)
    panel.placement.value, panel.bottleneck.value, panel.learning_rate.value = "parallel", 16, 1e-4
    config = panel.settings()
    assert (config.method, config.bottleneck, config.max_steps, config.batch_size) == ("parallel", 16, 40, 4)
    assert config.learning_rate == pytest.approx(1e-4) and config.eval_every == 20


def test_a_sweep_reuses_a_run_with_the_same_settings_and_trains_the_rest(panel, monkeypatch):
    """A run added with record() (trained outside the panel) and a run of the panel itself both count;
    a value that changes any setting trains; the rows come back in the order of the values."""
    config = panel.settings()  # houlsby, r = 64, σ = 1e-2
    outside = panel_module.run_experiment("sst2", config, backbone=TINY, data_dir=TOY_DIR, max_train=64, max_eval=32)
    recorded = panel.record(config, outside)
    assert recorded["value"] == outside.best_metric and recorded["run"] == 1

    trained = []
    real = panel_module.run_experiment

    def counting(task, config, **kwargs):
        trained.append(config.init_scale)
        return real(task, config, **kwargs)

    monkeypatch.setattr(panel_module, "run_experiment", counting)
    rows = panel.sweep("init_scale", [1e-3, 1e-2])
    assert trained == [pytest.approx(1e-3)]
    assert [row["init_scale"] for row in rows] == pytest.approx([1e-3, 1e-2]) and rows[1] is recorded
    assert panel.sweep("init_scale", [1e-2, 1e-3]) == [rows[1], rows[0]] and len(trained) == 1
    panel.learning_rate.value = 3e-3  # a different peak rate is a different run
    panel.sweep("init_scale", [1e-2])
    assert len(trained) == 2 and len(panel.runs) == 3


def test_recording_a_run_of_another_task_is_refused(panel):
    config = panel.settings()
    cola = panel_module.run_experiment("cola", config, backbone=TINY, data_dir=TOY_DIR, max_train=32, max_eval=16)
    with pytest.raises(ValueError, match="this panel trains 'sst2'.*'cola'"):
        panel.record(config, cola)
    assert panel.runs == []


@pytest.mark.parametrize("variant", list(profiles.variants()))
def test_lab_7s_first_run_has_the_settings_its_panel_sweeps_will_ask_for(variant, monkeypatch):
    """Lab 7 trains its first run with eval_every = steps // 2 and records it in the panel; if the
    panel's own settings differed, every sweep would silently train that run again (minutes with
    bert-base). This holds for every profile as it can run."""
    profile = profiles.variants()[variant]
    monkeypatch.setattr(panel_module, "current_profile", lambda: profile)
    panel = TrainingPanel("cola", backbone=TINY, steps=profile.steps)
    lab_run = TrainConfig(method="houlsby", bottleneck=64, init_scale=1e-2, learning_rate=1e-3,
                          max_steps=profile.steps, batch_size=profile.batch_size,
                          eval_every=max(profile.steps // 2, 1), seed=profile.seed, train_pooler=profile.train_pooler)
    # The lab's run trains in "auto"; the panel starts at fp32. They are one run where "auto" resolves to
    # fp32; where bf16 is faster they are two, and the panel finds its fp32 run among the reference runs.
    assert panel.settings().precision == "fp32" and lab_run.precision == "auto"
    fp32_lab_run = replace(lab_run, precision="fp32")
    assert panel_module._settings_key(panel.settings()) == panel_module._settings_key(fp32_lab_run)


def test_a_stored_setting_answers_without_training_and_train_again_checks_it(panel, monkeypatch):
    """The second panel finds the first one's run in the store: no model is loaded, the chart and the row
    are the stored run's, marked as stored; Train again trains it anew and gets the same numbers."""
    first = panel.train_once()
    again = TrainingPanel("sst2", backbone=TINY, data_dir=TOY_DIR, max_train=64, max_eval=32, config=panel.config,
                          steps=10)

    def must_not_train(*args, **kwargs):
        raise AssertionError("a stored setting was trained again")

    with monkeypatch.context() as patch:
        patch.setattr(panel_module, "run_experiment", must_not_train)
        patch.setattr("adapterlab.backbones.load_backbone", must_not_train)
        assert again.train_once() is None and again.last_result is None
    (row,) = again.runs
    assert row["stored"] and row["value"] == first.best_metric and row["trained"] == houlsby_trained(64)
    assert "stored result" in again.status.value and not again.retrain_button.disabled
    assert ">store<" in again.table.value
    loss = next(trace for trace in again.figure.data if "training loss" in trace.name)
    assert list(loss.y) == pytest.approx(first.history.loss)

    again.retrain_button.click()
    assert again.last_result is not None and not again.runs[-1]["stored"]
    assert again.last_result.best_metric == pytest.approx(first.best_metric)
    assert again.retrain_button.disabled and ">trained here<" in again.table.value


# ------------------------------------------------------------------------------------- precision and loading


def test_the_precision_menu_starts_at_fp32_and_every_row_says_its_precision(panel):
    assert panel.precision.value == "fp32" and panel.settings().precision == "fp32"
    assert [value for _, value in panel_module.PRECISION_CHOICES] == ["fp32", "auto", "bf16"]
    panel.bottleneck.value = 4
    panel.train_once()
    panel.precision.value = "bf16"
    result = panel.train_once()
    assert result.config.precision == "bf16" and panel.last_record["key"]["precision"] == "bf16"
    assert [row["precision"] for row in panel.runs] == ["fp32", "bf16"]
    assert "<th style='padding:2px 8px'>precision</th>" in panel.table.value and ">bf16<" in panel.table.value
    assert "finished in bf16" in panel.status.value
    with pytest.raises(ValueError, match="precision must be"):
        TrainingPanel("sst2", backbone=TINY, data_dir=TOY_DIR, precision="fp16")


def test_a_second_click_trains_a_fresh_copy_of_the_backbone_loaded_once(panel, monkeypatch):
    """The panel loads backbone and data once per task; every run starts from the backbone as loaded, so a
    run trained on the kept copy equals the same run trained from a fresh load."""
    loads = []
    real = panel_module.load_experiment
    monkeypatch.setattr(panel_module, "load_experiment", lambda *args: loads.append(args) or real(*args))
    panel.bottleneck.value = 4
    panel.placement.value = "head"  # trains the loaded model's own classifier: the next run must not start from it
    panel.learning_rate.value = 1e-2
    panel.train_once()
    panel.placement.value = "houlsby"
    second = panel.train_once()
    assert len(loads) == 1
    fresh = real(*loads[0])
    assert second.model is not fresh.model
    alone = panel_module.run_experiment("sst2", panel.settings(), backbone=TINY, data_dir=TOY_DIR, max_train=64,
                                        max_eval=32)
    assert second.history.loss == alone.history.loss and second.best_metric == alone.best_metric


def test_a_stored_fp32_run_answers_the_fp32_panel_and_its_status_says_fp32(panel, monkeypatch):
    panel.train_once()
    again = TrainingPanel("sst2", backbone=TINY, data_dir=TOY_DIR, max_train=64, max_eval=32, config=panel.config,
                          steps=10)

    def must_not_load(*args, **kwargs):
        raise AssertionError("loaded a backbone for a stored run")

    monkeypatch.setattr(panel_module, "load_experiment", must_not_load)
    assert again.train_once() is None and again.runs[0]["stored"] and "in fp32 on" in again.status.value
    again.precision.value = "bf16"  # the stored fp32 run does not stand in for a bf16 one
    with pytest.raises(AssertionError, match="loaded a backbone"), pytest.warns(UserWarning, match="an fp32 one is"):
        again.train_once()


def test_auto_in_the_panel_probes_once_on_the_kept_backbone(panel, monkeypatch):
    from adapterlab import precision

    monkeypatch.delenv(precision.PRECISION_ENV)
    loads, probes = [], []
    real_load, real_probe = panel_module.load_experiment, precision.probe
    monkeypatch.setattr(panel_module, "load_experiment", lambda *args: loads.append(1) or real_load(*args))
    monkeypatch.setattr(precision, "probe", lambda *args, **kw: probes.append(1) or real_probe(*args, **kw))
    panel.precision.value = "auto"
    panel.bottleneck.value = 4
    first = panel.train_once()
    panel.bottleneck.value = 8
    second = panel.train_once()
    assert loads == [1] and probes == [1]
    assert first.config.precision == second.config.precision == panel.runs[1]["precision"]
    assert first.precision.requested == "auto"


STANDIN_STUDENT = next(profile for name, profile in profiles.variants().items()
                       if name.startswith("student") and profile.sized_for == REFERENCE_BACKBONE)


def test_on_the_reference_backbone_the_panel_starts_at_a_stored_reference_run(monkeypatch):
    """The reference runs (data/reference_runs) were made with REFERENCE_CONFIG; the first press of Train
    shows one of them only if the panel's starting settings equal it in every setting that keys a run."""
    monkeypatch.setattr(panel_module, "current_profile", lambda: STANDIN_STUDENT)
    settings = TrainingPanel("sst2").settings()
    for name in ("method", "bottleneck", "init_scale", "max_steps", "batch_size", "eval_every", "train_pooler",
                 "precision", "seed"):
        assert getattr(settings, name) == getattr(REFERENCE_CONFIG, name), name


def test_elsewhere_the_panel_starts_at_its_profiles_steps(monkeypatch):
    ci = profiles.get_profile("ci")
    monkeypatch.setattr(panel_module, "current_profile", lambda: ci)
    assert TrainingPanel("sst2").steps.value == ci.panel_steps
    assert TrainingPanel("sst2", backbone=TINY).steps.value == ci.panel_steps


def test_the_status_says_what_happens_while_a_run_trains(panel):
    said, bars = [], []
    panel.status.observe(lambda change: said.append(change["new"]), names="value")
    panel.progress.observe(lambda change: bars.append(change["new"]), names="value")
    panel.train_button.click()
    assert said[0].startswith("Looking for a stored run 1")
    assert any("loading the backbone" in text for text in said)
    training = [text for text in said if text.startswith("Training run 1")]
    assert any("step 5 of 10" in text for text in training) and any("step 10 of 10" in text for text in training)
    assert 10 in bars and panel.progress.layout.visibility == "hidden", "the bar filled, then hidden"
    assert said[-1].startswith("Run 1 finished")


def test_the_panel_says_how_to_get_it_back_after_a_page_reload(panel):
    text = panel._repr_mimebundle_()["text/plain"]
    assert "VBox(" not in text and "run this cell again" in text
