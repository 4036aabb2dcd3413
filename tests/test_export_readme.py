"""The loading code an export writes into its folder's README.md runs as written, in the library's own environment
(AdapterHub's through tests/library_side.py, PEFT in this one), for sets of two labels and of three: the model it
builds computes the set's logits at 1e-5 and names its classifier's rows with the task's labels."""

from __future__ import annotations

import re

import pytest
import torch
from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import save_adapter_set
from adapterlab.placement import apply_method
from test_interop import (
    TOLERANCE,
    _batch,
    _batch_file,
    _randomize,
    adapterhub,  # noqa: F401 (a fixture, taken through request)
)
from test_interop_labels import three_label_task

from adapterlab.interop.common import HUB_NAMES
from adapterlab.interop.convert import export_set
from adapterlab.training.data import TASKS

CASES = {  # target, method, its settings, labels
    "AdapterHub, static head, 2 labels": ("adapterhub", "houlsby", {"bottleneck": 4, "train_layernorm": False}, 2),
    "AdapterHub, static head, 3 labels": ("adapterhub", "pfeiffer", {"bottleneck": 4, "train_layernorm": False}, 3),
    "AdapterHub, classification head and LayerNorms, 3 labels": (
        "adapterhub",
        "houlsby",
        {"bottleneck": 4, "train_layernorm": True, "train_pooler": True},
        3,
    ),
    "PEFT LoRA, 2 labels": ("peft", "lora", {"lora_rank": 2}, 2),
    "PEFT LoRA with the pooler, 3 labels": ("peft", "lora", {"lora_rank": 2, "train_pooler": True}, 3),
}


def _exported(tmp_path, monkeypatch, target: str, method: str, settings: dict, task):
    """A trained-looking set exported to ``target``, its base model saved as the hub holds one (the encoder, no
    classifier, a config of transformers' default two labels) under the name the README loads it by: (folder, the
    set's logits)."""
    base = load_backbone(TINY, num_labels=2, seed=0)[0].bert
    base.save_pretrained(tmp_path / "base")
    monkeypatch.setitem(HUB_NAMES, TINY, str(tmp_path / "base"))
    model, _, info = load_backbone(TINY, num_labels=task.num_labels, seed=0)
    assert all(torch.equal(weight, base.get_parameter(name)) for name, weight in model.bert.named_parameters())
    apply_method(model, method, **settings)
    trained_layernorms = settings.get("train_layernorm", False)
    _randomize(model, layernorms=trained_layernorms, pooler=settings.get("train_pooler", False))
    run = save_adapter_set(model, tmp_path / "run", backbone=info, extra={"task": task.name, "seed": 0})
    out = export_set(run, target, tmp_path / "out", backbone_tensors=trained_layernorms)
    with torch.no_grad():
        return out, model(**_batch()).logits


def _python_block(readme) -> str:
    blocks = re.findall(r"```python\n(.*?)```", readme.read_text(encoding="utf-8"), flags=re.DOTALL)
    assert len(blocks) == 1, blocks
    return blocks[0]


def _run_here(code: str) -> tuple[torch.Tensor, list[str]]:
    """The PEFT snippet in this environment: (the logits of the model it builds, its labels by row)."""
    scope = {}
    exec(code, scope)  # noqa: S102 (the code an export wrote, run as its README says to)
    model = scope["model"]  # as the code leaves it: no eval() that the README does not say
    with torch.no_grad():
        logits = model(**_batch()).logits
    return logits, [model.config.id2label[row] for row in range(len(model.config.id2label))]


@pytest.mark.parametrize("case", list(CASES))
def test_the_readme_of_an_export_loads_it_as_written(case, tmp_path, monkeypatch, request):
    target, method, settings, labels = CASES[case]
    task = TASKS["sst2"] if labels == 2 else three_label_task(monkeypatch)
    out, ours = _exported(tmp_path, monkeypatch, target, method, settings, task)
    code = _python_block(out / "README.md")
    if target == "adapterhub":
        job = {"job": "snippet", "code": code, "batch": _batch_file(tmp_path)}
        tensors, info = request.getfixturevalue("adapterhub")(job, tmp_path)
        theirs, names = tensors["logits"], info["labels"]
    else:
        pytest.importorskip("peft")
        theirs, names = _run_here(code)
    assert names == list(task.label_names)
    assert (theirs - ours).abs().max().item() <= TOLERANCE
