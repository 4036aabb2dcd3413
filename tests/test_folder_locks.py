"""`import` and `export` write their --out as `train` does: under the same lock, whole or not at all, and a kill
in the middle leaves nothing the next command on that folder trips over."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import safetensors.torch
import torch
from safetensors import SafetensorError

from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import save_adapter_set
from adapterlab.cli import FAILED, OK, USAGE, main
from adapterlab.placement import apply_method
from adapterlab.run_folder import RunFolderError, claim_run_folder, hidden_name
from adapterlab.training import backbones

from test_never_lose_work import (FAST, error_lines, finish, hidden_beside, report, start, wait_for,
                                  wrapper)  # noqa: F401 (a fixture)


@pytest.fixture
def peft_folder(tmp_path):
    """A PEFT folder exported from a small LoRA set of the tiny backbone."""
    model, _, info = load_backbone(TINY, num_labels=2, seed=0)
    apply_method(model, "lora", lora_rank=2)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.1)
    run = save_adapter_set(model, tmp_path / "set", backbone=info, extra={"task": "sst2", "seed": 0})
    assert main(["export", str(run), "--to", "peft", "--out", str(tmp_path / "peft")]) == OK
    return tmp_path / "peft"


def test_two_imports_into_one_folder_one_is_refused(peft_folder, tmp_path, capsys, monkeypatch):
    out, second = tmp_path / "imported", {}
    real_load = backbones.load_backbone

    def load_while_another_imports(*args, **kwargs):  # the first import is under way: a second one starts
        if not second:
            second["code"] = main(["import", str(peft_folder), "--out", str(out)])
            second["err"] = capsys.readouterr().err
        return real_load(*args, **kwargs)

    monkeypatch.setattr(backbones, "load_backbone", load_while_another_imports)
    capsys.readouterr()
    assert main(["import", str(peft_folder), "--out", str(out)]) == OK
    assert second["code"] == USAGE
    lines = error_lines(second["err"], "import")
    assert len(lines) == 1 and "is being written by another adapterlab" in lines[0], second["err"]
    assert hidden_beside(out) == [] and sorted(p.name for p in out.iterdir()) == ["adapter_config.json",
                                                                                   "adapters.safetensors"]


def test_import_overwrite_is_refused_while_train_writes_the_folder(peft_folder, tmp_path, wrapper):
    out, gate = tmp_path / "run", tmp_path / "gate"
    assert main(["train", "--out", str(out), *FAST]) == OK
    gate.touch()
    training = start(wrapper, "train", "--out", out, *FAST, "--seed", "4", "--overwrite", HOLD_RUN="1",
                     HOLD_STEP="2", HOLD_WHILE=str(gate))
    try:
        wait_for(training, "HELD")
        code, _, err = finish(start(wrapper, "import", peft_folder, "--out", out, "--overwrite"))
        assert code == USAGE and len(error_lines(err, "import")) == 1, err
        assert "is being written by another adapterlab" in err
    finally:
        gate.unlink()
    code, _, err = finish(training)
    assert code == OK, err
    assert report(out)["config"]["seed"] == 4 and hidden_beside(out) == []


def test_export_overwrite_killed_between_its_renames_is_finished_by_the_next_command(tmp_path, wrapper, capsys):
    run, out = tmp_path / "lora", tmp_path / "out"
    assert main(["train", "--out", str(run), *FAST, "--method", "lora", "--lora-rank", "2"]) == OK
    assert main(["train", "--out", str(out), *FAST]) == OK
    code, _, err = finish(start(wrapper, "export", run, "--to", "peft", "--out", out, "--overwrite",
                                KILL_IN_COMMIT="1"))
    assert code == -signal.SIGKILL, err
    capsys.readouterr()
    assert main(["import", str(out), "--out", str(tmp_path / "back")]) == OK  # reads the export, now in place
    assert "now holds the run a process killed while writing it had finished" in capsys.readouterr().err
    assert hidden_beside(out) == [] and (out / "adapterlab_export.json").is_file()
    assert main(["evaluate", "--checkpoint", str(tmp_path / "back"), "--max-eval", "16"]) == OK


def test_a_held_lock_keeps_export_out(peft_folder, tmp_path, capsys):
    run = tmp_path / "set"
    with claim_run_folder(tmp_path / "busy"):
        capsys.readouterr()
        assert main(["export", str(run), "--to", "peft", "--out", str(tmp_path / "busy")]) == USAGE
    assert "is being written by another adapterlab" in capsys.readouterr().err
    assert not (tmp_path / "busy").exists()


def test_export_onto_a_full_disk_ends_in_one_plain_line(peft_folder, tmp_path, capsys, monkeypatch):
    out = tmp_path / "full"

    def full_disk(*args, **kwargs):  # what safetensors raises when a tmpfs fills up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(safetensors.torch, "save_file", full_disk)
    capsys.readouterr()
    assert main(["export", str(tmp_path / "set"), "--to", "peft", "--out", str(out)]) == FAILED
    err = capsys.readouterr().err
    lines = error_lines(err, "export")
    assert len(lines) == 1 and len(err.strip().splitlines()) == 1 and "the disk is full" in lines[0], err
    assert not out.exists() and hidden_beside(out) == []


def test_a_hard_link_at_the_lock_path_is_refused_and_its_file_kept(tmp_path):
    """O_NOFOLLOW stops a symbolic link, not a hard link: the lock's note would truncate the linked file."""
    target = tmp_path / "notes.txt"
    target.write_text("keep me")
    os.link(target, tmp_path / hidden_name(tmp_path / "run", "lock"))
    with pytest.raises(RunFolderError, match="is a link \\(symbolic or hard\\) or not a plain file"), \
            claim_run_folder(tmp_path / "run"):
        pass
    assert target.read_text() == "keep me"


def test_a_folder_where_no_file_can_be_made_ends_in_one_line_not_a_spin(tmp_path):
    """/proc/self refuses new files with "no such file": the lock must not retry that for ever."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc on this system")
    outcome = []

    def claim():
        try:
            with claim_run_folder("/proc/self/run"):
                outcome.append("claimed")
        except RunFolderError as error:
            outcome.append(str(error))

    worker = threading.Thread(target=claim, daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert not worker.is_alive(), "the lock kept retrying"
    assert len(outcome) == 1 and outcome[0].startswith("cannot write the run to /proc/self/run")
