"""The command line: one error style, one exit-code policy, and run folders that never lose or mix a run.

Every command runs in-process through ``adapterlab.cli.main`` on the 2-layer tiny-random backbone and
the toy data (a few steps each), except one round trip on the pretrained stand-in.
"""

from __future__ import annotations

import json
import math
import os

import pytest
from accelerate.utils import set_seed

from adapterlab import backbones, training
import adapterlab.training.experiment  # noqa: F401  (patched below)
from adapterlab.backbones import STANDIN, TINY, load_backbone, standin_installed
from adapterlab.checkpoints import load_adapter_set
from adapterlab.cli import FAILED, INTERRUPTED, OK, USAGE, build_parser, main
from adapterlab.data import load_split, tokenize
from adapterlab.evaluation import evaluate
from adapterlab.placement import METHODS, apply_method

FAST = ["--backbone", TINY, "--bottleneck", "8", "--batch-size", "16", "--max-train", "64", "--max-eval", "32",
        "--no-progress"]


pytestmark = pytest.mark.usefixtures("toy_data_only")


def train(out, *extra) -> int:
    return main(["train", "--out", str(out), *FAST, *extra])


def error_line(capsys, command: str) -> str:
    """The one line a failed command writes to stderr."""
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("adapterlab ")]
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"adapterlab {command}: ")
    return lines[0]


def report(folder) -> dict:
    return json.loads((folder / "metrics.json").read_text())


def leftovers(folder) -> list[str]:
    """Hidden staging folders left beside a run folder."""
    return [p.name for p in folder.parent.iterdir() if p.name.startswith(f".{folder.name}.")]


def no_loading(monkeypatch):
    """Make any backbone load fail loudly: a check that must come first shows that nothing was loaded."""

    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was loaded before the arguments were checked")

    monkeypatch.setattr(backbones, "load_backbone", refuse)


# -------------------------------------------------------------------------------------- one command layer


def test_method_and_task_choices_come_from_the_tables():
    commands = build_parser()._subparsers._group_actions[0].choices
    method = next(a for a in commands["train"]._actions if a.dest == "method")
    assert tuple(method.choices) == METHODS
    task = next(a for a in commands["evaluate"]._actions if a.dest == "task")
    assert set(task.choices) == {"sst2", "cola", "mrpc", "rte"}


@pytest.mark.parametrize("arguments, words", [
    (["--epochs", "-1"], "epochs"),
    (["--max-train", "0"], "--max-train"),
    (["--lr", "0"], "learning_rate"),
    (["--data", "nowhere-at-all"], "nowhere-at-all"),
])
def test_bad_arguments_are_usage_errors_before_anything_loads(tmp_path, capsys, monkeypatch, arguments, words):
    no_loading(monkeypatch)
    assert train(tmp_path / "run", *arguments) == USAGE
    assert words in error_line(capsys, "train")
    assert not (tmp_path / "run").exists() and not leftovers(tmp_path / "run")


def test_argparse_errors_return_the_usage_code(capsys):
    assert main(["train", "--out", "x", "--method", "prefix"]) == USAGE
    line = error_line(capsys, "train")
    assert "method must be one of" in line and "got 'prefix'" in line
    assert main(["--help"]) == OK


# -------------------------------------------------------------------------------------- --out


def test_a_finished_run_is_not_overwritten_without_overwrite(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert train(out) == OK
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert set(before) == {"metrics.json", "adapter_config.json", "adapters.safetensors"}
    capsys.readouterr()
    no_loading(monkeypatch)
    assert train(out, "--method", "full") == USAGE
    line = error_line(capsys, "train")
    assert "already holds a houlsby run on sst2" in line and "--overwrite" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_overwrite_with_another_method_leaves_no_old_adapters(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == OK
    assert train(out, "--method", "full", "--overwrite") == OK
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]
    assert report(out)["config"]["method"] == "full" and not leftovers(out)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == USAGE  # nothing to score, and it says why
    line = error_line(capsys, "evaluate")
    assert "holds a full run on sst2" in line and "trains the backbone's own weights" in line


def test_overwrite_keeps_the_old_run_until_the_new_one_is_complete(tmp_path, capsys, monkeypatch):
    out = tmp_path / "run"
    assert train(out) == OK
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(training.experiment, "train", fail)
    assert train(out, "--method", "full", "--overwrite") == FAILED
    assert "disk full" in error_line(capsys, "train")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before and not leftovers(out)


@pytest.mark.parametrize("where", ["under-a-file", "read-only"])
def test_an_unwritable_out_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch, where):
    if where == "under-a-file":
        (tmp_path / "a-file").write_text("")
        out = tmp_path / "a-file" / "run"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders")
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o555)
        out = locked / "run"
    no_loading(monkeypatch)
    assert train(out) == USAGE
    line = error_line(capsys, "train")
    assert str(out) in line and ("choose an --out folder" in line)


# -------------------------------------------------------------------------------------- how a run ends


def test_ctrl_c_writes_a_usable_run_and_exits_130(tmp_path, capsys, monkeypatch):
    calls = []
    real_collate = training.loop.collate

    def collate_then_stop(*args):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_collate(*args)

    monkeypatch.setattr(training.loop, "collate", collate_then_stop)
    out = tmp_path / "run"
    assert train(out) == INTERRUPTED
    assert "interrupted after 2 steps" in error_line(capsys, "train")
    saved = report(out)
    assert saved["status"] == "interrupted" and saved["history"]["steps"] == [1, 2] and saved["interrupted"]
    model, _, _ = load_backbone(TINY)
    load_adapter_set(model, out)  # the checkpoint loads
    assert main(["evaluate", "--checkpoint", str(out), "--max-eval", "16"]) == OK


def test_ctrl_c_before_training_leaves_nothing_behind(tmp_path, capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(backbones, "load_backbone", interrupted)
    out = tmp_path / "run"
    assert train(out) == INTERRUPTED
    assert "interrupted" in error_line(capsys, "train")
    assert not out.exists() and not leftovers(out)


def test_a_nan_loss_names_the_learning_rate_and_keeps_the_partial_history(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--lr", "1e6") == FAILED
    line = error_line(capsys, "train")
    assert "training diverged: the loss is nan" in line and "Likely cause: the learning rate is too high" in line
    assert "init_scale" not in line and "metrics.json" in line
    saved = report(out)
    assert saved["status"] == "diverged" and saved["checkpoint"] is None
    losses = saved["history"]["loss"]  # the NaN loss is null: metrics.json stays JSON that any reader parses
    assert losses[-1] is None and len(losses) == saved["diverged_at_step"] >= 2
    assert "NaN" not in (out / "metrics.json").read_text()
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == USAGE
    assert "diverged at step" in error_line(capsys, "evaluate")


def test_a_loss_that_runs_away_while_finite_fails_the_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out, "--lr", "1000", "--max-train", "200", "--epochs", "3") == FAILED
    line = error_line(capsys, "train")
    assert "stayed above 10x its start" in line and "learning rate is too high (peak 1000" in line
    saved = report(out)
    assert saved["status"] == "diverged" and all(math.isfinite(v) for v in saved["history"]["loss"])
    assert saved["history"]["loss"][-1] > 10 * saved["history"]["loss"][0]


# -------------------------------------------------------------------------------------- data


def test_a_missing_data_folder_from_the_environment_is_an_error(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ADAPTERLAB_DATA", "/nonexistent")
    no_loading(monkeypatch)
    assert train(tmp_path / "run") == USAGE
    assert "ADAPTERLAB_DATA='/nonexistent' is not a folder" in error_line(capsys, "train")
    assert not (tmp_path / "run").exists()


def test_metrics_json_says_when_toy_data_was_used(tmp_path):
    out = tmp_path / "run"
    assert train(out) == OK
    saved = report(out)
    assert saved["toy_data"] is True and saved["status"] == "complete"
    assert "TOY DATA" in saved["data"]["train"]


# -------------------------------------------------------------------------------------- evaluate


def test_evaluate_refuses_another_task_and_a_folder_without_a_run(tmp_path, capsys):
    out = tmp_path / "run"
    assert train(out) == OK
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out), "--task", "cola"]) == USAGE
    assert "trained on sst2, not cola" in error_line(capsys, "evaluate")
    (tmp_path / "empty").mkdir()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "empty")]) == USAGE
    assert "holds no adapter set" in error_line(capsys, "evaluate")
    assert main(["evaluate", "--checkpoint", str(tmp_path / "absent")]) == USAGE
    assert "absent" in error_line(capsys, "evaluate")


@pytest.mark.skipif(not standin_installed(), reason=f"the offline stand-in {STANDIN} is not installed")
def test_train_then_evaluate_reproduces_the_metrics(tmp_path, capsys):
    # The stand-in, not the tiny random model: on a random frozen backbone adapters learn nothing, and
    # a round trip of an untrained adapter set would prove little.
    out = tmp_path / "run"
    assert main(["train", "--task", "sst2", "--method", "houlsby", "--bottleneck", "8", "--backbone", STANDIN,
                 "--max-train", "64", "--max-eval", "60", "--epochs", "1", "--lr", "3e-3", "--batch-size", "16",
                 "--seed", "5", "--out", str(out), "--no-progress"]) == OK
    saved = report(out)
    assert (out / "adapters.safetensors").is_file() and saved["checkpoint"] == str(out)
    assert saved["config"]["seed"] == 5 and saved["backbone"]["loaded"] == STANDIN
    assert "64 of 200 rows" in saved["data"]["train"]
    assert saved["history"]["steps"][-1] == 4 and len(saved["history"]["rows"]) == 1
    capsys.readouterr()

    assert main(["evaluate", "--checkpoint", str(out), "--max-eval", "60"]) == OK
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["metrics"]
    assert metrics["accuracy"] == saved["metrics"]["accuracy"]
    assert metrics["loss"] == pytest.approx(saved["metrics"]["loss"], rel=1e-5)
    model, tokenizer, _ = load_backbone(STANDIN, seed=5)  # the run's starting point: training mattered
    set_seed(5)
    apply_method(model, "houlsby", bottleneck=8)
    start = evaluate(model, tokenize(load_split("sst2", "dev", source="toy", max_examples=60, seed=5), tokenizer))
    assert abs(start["loss"] - metrics["loss"]) > 1e-3


# -------------------------------------------------------------------------------------- count


def test_count_reports_bad_input_in_the_common_style_and_prints_json(capsys):
    assert main(["count", "--bottleneck", "0"]) == USAGE
    assert "bottleneck must be an integer >= 1" in error_line(capsys, "count")
    assert main(["count", "--backbone", "bert-base", "--bottleneck", "64", "--json"]) == OK
    printed = json.loads(capsys.readouterr().out)
    assert printed["backbone"] == "bert-base"
    # The paper's BERT-base Houlsby count with m = 64 (DESIGN.md's table), not a number from the code.
    assert "2379264" in json.dumps(printed).replace(",", "")


# -------------------------------------------------------------------------------------- tune


def test_tune_on_a_training_split_too_small_for_its_validation_rows_says_to_pass_the_data(tmp_path, capsys,
                                                                                         monkeypatch):
    no_loading(monkeypatch)
    assert main(["tune", "--task", "cola", "--backbone", TINY, "--store", str(tmp_path)]) == USAGE
    line = error_line(capsys, "tune")
    assert "800 training rows aside" in line and "the 200 rows of" in line and "pass --data DIR" in line
    assert "validation_rows" not in line and list(tmp_path.iterdir()) == []


def test_tune_finds_a_store_it_cannot_write_before_anything_trains(tmp_path, capsys, monkeypatch):
    from test_never_lose_work import read_only, small_disk

    from adapterlab.runs import tuning

    monkeypatch.setitem(tuning.PROTOCOLS, "sst2", tuning.Protocol("sst2", validation_rows=40, max_train=64, epochs=1.0,
                                                                  eval_every=2))
    no_loading(monkeypatch)
    blocked = tmp_path / "a file"
    blocked.write_text("")
    tune = ["tune", "--task", "sst2", "--backbone", TINY, "--points", "head only", "--store"]
    assert main([*tune, str(blocked / "store")]) == USAGE
    assert f"the run store {blocked / 'store'} cannot be written" in error_line(capsys, "tune")
    with small_disk(tmp_path / "disk") as disk:
        read_only(disk)
        assert main([*tune, str(disk / "store")]) == USAGE
        line = error_line(capsys, "tune")
        assert "cannot be written (the file system is read-only)" in line and "--store DIR" in line


# -------------------------------------------------------------------------------------- evaluate: what it reads


@pytest.mark.parametrize("extra, words", [
    ([{"task": "sst2"}], "'extra' is a JSON list, not an object"),
    ({"task": "sst2", "seed": "3"}, "extra.seed is '3', not an integer"),
    ({"task": "sst2", "seed": 10**30}, f"extra.seed is {10**30}, not an integer from 0 to 4294967295"),
])
def test_evaluate_names_the_file_and_field_of_a_sealed_manifests_bad_extra(tmp_path, capsys, monkeypatch, extra, words):
    from adapterlab.checkpoints import manifest_checksum

    out = tmp_path / "run"
    assert train(out) == OK
    path = out / "adapter_config.json"
    manifest = {**json.loads(path.read_text()), "extra": extra}
    path.write_text(json.dumps({**manifest, "checksum": manifest_checksum(manifest)}))
    no_loading(monkeypatch)
    capsys.readouterr()
    assert main(["evaluate", "--checkpoint", str(out)]) == USAGE
    assert f"{path} is malformed: {words}" in error_line(capsys, "evaluate")


def test_evaluate_reports_no_score_when_the_outputs_overflowed(tmp_path, capsys, monkeypatch):
    """NaN logits still have an argmax: the accuracy of such a model is a number, and meaningless."""
    from adapterlab.training import evaluation

    out = tmp_path / "run"
    assert train(out) == OK
    capsys.readouterr()
    for broken in ({"accuracy": 0.5, "loss": math.nan}, {"accuracy": math.nan, "loss": 0.7}):
        monkeypatch.setattr(evaluation, "evaluate", lambda *args, metrics=broken, **kwargs: dict(metrics))
        assert main(["evaluate", "--checkpoint", str(out)]) == FAILED
        captured = capsys.readouterr()
        assert "0.5" not in captured.out and "accuracy" not in captured.out and "nan" not in captured.out.lower()
        lines = [line for line in captured.err.splitlines() if line.strip()]
        assert len(lines) == 1 and "came out NaN or infinite" in lines[0] and "no score is reported" in lines[0]


# -------------------------------------------------------------------------------------- starting


#: The command line started as `python -m adapterlab ARGS` runs it, or as the `adapterlab` script does (pyproject's
#: [project.scripts]), with a Ctrl-C (SIGINT) arriving as torch starts to load.
STARTS = {"python -m": 'runpy._run_module_as_main("adapterlab")',
          "script": "from adapterlab.__main__ import run; sys.exit(run())"}
CTRL_C_WHILE_TORCH_LOADS = """
import importlib.abc, os, runpy, signal, sys

class CtrlC(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch":
            os.kill(os.getpid(), signal.SIGINT)

signal.signal(signal.SIGINT, signal.default_int_handler)  # as at a terminal, even where the parent ignores Ctrl-C
sys.meta_path.insert(0, CtrlC())
sys.argv = ["-m", *sys.argv[1:]]
"""


@pytest.mark.parametrize("start", STARTS)
def test_a_ctrl_c_while_torch_loads_ends_in_one_line_and_exit_130(start):
    import subprocess
    import sys
    import tomllib
    from pathlib import Path

    scripts = tomllib.loads((Path(__file__).parent.parent / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"adapterlab": "adapterlab.__main__:run"}
    done = subprocess.run([sys.executable, "-c", CTRL_C_WHILE_TORCH_LOADS + STARTS[start], "count", "--bottleneck",
                           "8"], capture_output=True, text=True, timeout=300)
    assert done.returncode == INTERRUPTED and done.stdout == ""
    assert done.stderr.splitlines() == ["adapterlab: interrupted while loading; nothing was done"]


def test_train_save_dtype_fp16_halves_the_set_and_loads_back_within_its_rounding(tmp_path):
    import torch
    from safetensors import safe_open

    assert train(tmp_path / "fp32", "--seed", "3") == OK
    assert train(tmp_path / "fp16", "--seed", "3", "--save-dtype", "fp16") == OK
    def tensor_bytes(name):  # the file less its 8-byte length and JSON header
        data = (tmp_path / name / "adapters.safetensors").read_bytes()
        return len(data) - 8 - int.from_bytes(data[:8], "little")

    assert tensor_bytes("fp16") * 2 == tensor_bytes("fp32")
    with safe_open(tmp_path / "fp16" / "adapters.safetensors", "pt") as half, \
            safe_open(tmp_path / "fp32" / "adapters.safetensors", "pt") as full:
        assert {half.get_tensor(k).dtype for k in half.keys()} == {torch.float16}
        for key in full.keys():  # the same run, so the same weights, rounded to fp16
            assert torch.equal(half.get_tensor(key), full.get_tensor(key).half()), key
    model, _, _ = load_backbone(TINY, seed=3)
    apply_method(model, "houlsby", bottleneck=8)
    load_adapter_set(model, tmp_path / "fp16")
    assert next(model.parameters()).dtype == torch.float32
