"""The order of a classifier's labels across export and import. A library's folder may name its classifier's rows
in another order than the task's (AdapterHub's label2id, the model config saved beside a PEFT adapter): import puts
the rows in the task's order, or refuses labels that are not the task's, naming both orders. Export writes the
task's names, so they come back. The folders are made with the libraries' own API and save methods."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from adapterlab.backbones import TINY, load_backbone
from test_interop import (  # noqa: F401 (fixtures, taken through request)
    TOLERANCE,
    _batch,
    _batch_file,
    _evaluate_imported,
    _our_set,
    adapterhub,
    base_folder,
)

from adapterlab.interop.convert import InteropError, export_set, import_set
from adapterlab.methods.checkpoints import load_adapter_set
from adapterlab.training.data import TASKS

#: SST-2's labels (GLUE: negative 0, positive 1) the other way round.
SWAPPED = {"0": "positive", "1": "negative"}


def three_label_task(monkeypatch):
    """A task of three labels, registered (for the test) as a task of the user's own files is."""
    names = ("entailment", "neutral", "contradiction")
    task = dataclasses.replace(TASKS["rte"], name="nli3", num_labels=3, label_names=names, label_values=names)
    monkeypatch.setitem(TASKS, task.name, task)
    return task


def _hub_saved(request, tmp_path, **job):
    """A SeqBn adapter saved by AdapterHub with its head (``head``: a classification head's settings; without it
    the static head of a BertForSequenceClassification whose config names ``id2label``): (folder, logits)."""
    folder = tmp_path / "saved"
    job = {
        "job": "save",
        "base": str(request.getfixturevalue("base_folder")),
        "folder": str(folder),
        "preset": "SeqBnConfig",
        "settings": {"reduction_factor": 4},
        "name": "sst2",
        "seed": 5,
        "scale": 0.2,
        "batch": _batch_file(tmp_path),
        **job,
    }
    tensors, _ = request.getfixturevalue("adapterhub")(job, tmp_path)
    return folder, tensors["logits"]


HUB_ORDERS = {
    "a classification head": {"head": {"num_labels": 2, "id2label": SWAPPED}},
    "a static head": {"id2label": SWAPPED},
    "names in another case": {"head": {"num_labels": 2, "id2label": {"0": "Positive", "1": "NEGATIVE"}}},
}


@pytest.mark.parametrize("case", list(HUB_ORDERS))
def test_an_adapterhub_head_of_the_task_s_labels_in_another_order_imports_in_the_task_s_order(case, tmp_path, request):
    folder, theirs = _hub_saved(request, tmp_path, **HUB_ORDERS[case])
    out, summary = import_set(folder, tmp_path / "imported", backbone=TINY)
    # the library's row 0 scores positive, the imported set's row 1 does: the same scores, swapped exactly
    assert (_evaluate_imported(out) - theirs[:, [1, 0]]).abs().max().item() <= TOLERANCE
    assert (theirs[:, 0] - theirs[:, 1]).abs().min().item() > 1e-3
    assert any("negative, positive" in note for note in summary["notes"])


PEFT_ORDERS = {  # the task, the names of the saved classifier's rows
    "SST-2's labels swapped": ("sst2", ["positive", "negative"]),
    "three labels in a cycle": ("nli3", ["neutral", "contradiction", "entailment"]),
}


@pytest.mark.parametrize("case", list(PEFT_ORDERS))
def test_a_peft_adapter_with_its_model_config_beside_it_imports_in_the_task_s_order(case, tmp_path, monkeypatch):
    peft = pytest.importorskip("peft")
    three_label_task(monkeypatch)
    task, saved = TASKS[PEFT_ORDERS[case][0]], PEFT_ORDERS[case][1]
    base, _, _ = load_backbone(TINY, num_labels=len(saved), seed=0)
    base.config.id2label = dict(enumerate(saved))
    base.config.label2id = {name: row for row, name in enumerate(saved)}
    config = peft.LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"])
    model = peft.get_peft_model(base, config).eval()
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for parameter in (p for p in model.parameters() if p.requires_grad):
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.2)
        theirs = model(**_batch()).logits
    model.save_pretrained(str(tmp_path / "saved"))
    # config.json: the model's labels beside the adapter
    model.config.save_pretrained(str(tmp_path / "saved"))
    out, _ = import_set(tmp_path / "saved", tmp_path / "imported", backbone=TINY, task=task.name)
    imported, _, _ = load_backbone(TINY, num_labels=len(saved), seed=0)
    load_adapter_set(imported, out)
    with torch.no_grad():
        ours = imported(**_batch()).logits
    # the task's label i is scored by the library's row that names it
    rows = [saved.index(label) for label in task.label_names]
    assert (ours - theirs[:, rows]).abs().max().item() <= TOLERANCE


def test_labels_that_are_not_the_task_s_are_refused_naming_both_orders(tmp_path, request):
    folder, _ = _hub_saved(request, tmp_path, head={"num_labels": 2, "id2label": {"0": "good", "1": "bad"}})
    with pytest.raises(InteropError, match=r"good, bad .*negative, positive.*--task") as refused:
        import_set(folder, tmp_path / "imported", backbone=TINY)
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize(
    ("target", "method", "settings"),
    [
        ("adapterhub", "pfeiffer", {"bottleneck": 4, "train_layernorm": False}),
        ("peft", "lora", {"lora_rank": 2}),
    ],
)
def test_export_writes_the_task_s_label_names_which_import_reads_back(target, method, settings, tmp_path):
    run, ours = _our_set(tmp_path, method, **settings)
    out = export_set(run, target, tmp_path / "out")
    if target == "adapterhub":
        assert json.loads((out / "head_config.json").read_text())["label2id"] == {"negative": 0, "positive": 1}
    back, _ = import_set(out, tmp_path / "back")
    assert (_evaluate_imported(back) - ours).abs().max().item() <= TOLERANCE
    # CoLA has two labels too, but not these
    with pytest.raises(InteropError, match="negative, positive.*unacceptable, acceptable"):
        import_set(out, tmp_path / "as-cola", task="cola")
