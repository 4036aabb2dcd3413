"""The AdapterHub side of tests/test_interop.py, run by the Python of the library's own environment (.venv-library).

    python tests/library_side.py JOB.json     # one job
    python tests/library_side.py --serve      # a job file's path per line on stdin, "ok" or the error per line back

It imports only torch, transformers, safetensors and adapters (never adapterlab, whose environment holds another
transformers), does one job and writes its tensors to the job's "out" file (safetensors):

* ``load``       — load a folder with the library's public API (``adapters.init``, ``model.load_adapter(DIR,
  use_safetensors=True, set_active=True)``; the trained backbone tensors beside it with ``load_state_dict``)
  and give the logits of the given batch;
* ``save``       — add one of the library's presets to the base model (and one of its flexible heads), draw
  random non-zero weights for it and the head, ``save_adapter(DIR, name, with_head=True, use_safetensors=True)``
  (or ``save_adapter_setup``, or a ``.bin``), give the logits;
* ``equivalent`` — build a preset, copy adapterlab's adapter weights in by name, give the last hidden states
  (the computation alone, without any export);
* ``snippet``    — run the given Python (the loading code of an exported folder's README.md, as written), give the
  logits of the ``model`` it builds and the names of its classifier's rows.
"""

from __future__ import annotations

import json
import sys

import adapters
import safetensors.torch
import torch
import transformers

PRESETS = {"DoubleSeqBnConfig": adapters.DoubleSeqBnConfig, "SeqBnConfig": adapters.SeqBnConfig,
           "ParBnConfig": adapters.ParBnConfig, "LoRAConfig": adapters.LoRAConfig, "VeraConfig": adapters.VeraConfig,
           "PrefixTuningConfig": adapters.PrefixTuningConfig}


def _batch(job):
    tensors = safetensors.torch.load_file(job["batch"])
    return {"input_ids": tensors["input_ids"], "attention_mask": tensors["attention_mask"]}


def _by_row(id2label: dict) -> dict:
    """An id2label map as transformers and AdapterHub take it: JSON's keys are text, theirs are row numbers."""
    return {int(row): name for row, name in id2label.items()}


def _model(job, heads: bool = True):
    """``id2label``: the model config's label names, as a user sets them (with label2id) in from_pretrained."""
    cls = transformers.BertForSequenceClassification if heads else transformers.BertModel
    labels = {}
    if job.get("id2label"):
        id2label = _by_row(job["id2label"])
        labels = {"id2label": id2label, "label2id": {name: row for row, name in id2label.items()}}
    model = cls.from_pretrained(job["base"], **labels).eval()
    adapters.init(model)
    return model


def load(job):
    """``flexible``: into an AutoAdapterModel, which loads a flexible head saved with the adapter by itself."""
    model = adapters.AutoAdapterModel.from_pretrained(job["base"]).eval() if job.get("flexible") else _model(job)
    name = model.load_adapter(job["folder"], use_safetensors=True, set_active=True)
    if job.get("backbone_tensors"):
        result = model.load_state_dict(safetensors.torch.load_file(job["backbone_tensors"]), strict=False)
        assert not result.unexpected_keys, result.unexpected_keys
    with torch.no_grad():
        logits = model(**_batch(job)).logits
    return {"logits": logits}, {"name": name, "active": str(model.active_adapters)}


def save(job):
    """A preset on the base model with the library's static head, or with one of its flexible heads (``head``: the
    settings of ``add_classification_head`` on an AutoAdapterModel); saved by ``save_adapter`` (``setup``:
    ``save_adapter_setup``), as safetensors unless ``use_safetensors`` is false."""
    head = job.get("head")
    model = adapters.AutoAdapterModel.from_pretrained(job["base"]).eval() if head is not None else _model(job)
    model.add_adapter(job["name"], config=PRESETS[job["preset"]](**job["settings"]), set_active=True)
    if head is not None:
        if "id2label" in head:
            head = {**head, "id2label": _by_row(head["id2label"])}
        model.add_classification_head(job["name"], **head)
    model.eval()  # the modules just added start in training mode (dropout on)
    generator = torch.Generator().manual_seed(job["seed"])
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if f".{job['name']}." in name or name.startswith("classifier."):
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * job["scale"])
        logits = model(**_batch(job)).logits
    safe = job.get("use_safetensors", True)
    if job.get("setup"):
        model.save_adapter_setup(job["folder"], job["name"], head_setup=job["name"], use_safetensors=safe)
    else:
        model.save_adapter(job["folder"], job["name"], with_head=True, use_safetensors=safe)
    return {"logits": logits}, {}


def equivalent(job):
    model = _model(job, heads=False)
    model.add_adapter("t", config=PRESETS[job["preset"]](**job["settings"]), set_active=True)
    ours = safetensors.torch.load_file(job["weights"])
    state = dict(model.named_parameters())
    copied = set()
    with torch.no_grad():
        for name, tensor in ours.items():  # adapterlab's names, e.g. encoder.layer.0.output.adapter.down.weight
            theirs = (name.replace(".adapter.down.", ".adapters.t.adapter_down.0.")
                      .replace(".adapter.up.", ".adapters.t.adapter_up."))
            state[theirs].copy_(tensor)
            copied.add(theirs)
        missing = sorted(n for n in state if ".adapters.t." in n and n not in copied)
        assert not missing, f"adapter parameters without a value: {missing}"
        hidden = model(**_batch(job)).last_hidden_state
    return {"hidden": hidden}, {}


def snippet(job):
    scope = {}
    exec(job["code"], scope)  # noqa: S102 (the code an export wrote, run as its README says to)
    model = scope["model"]  # as the code leaves it: no eval() that the README does not say
    labels = model.get_labels_dict() if hasattr(model, "heads") else model.config.id2label
    with torch.no_grad():
        logits = model(**_batch(job)).logits
    return {"logits": logits}, {"labels": [labels[row] for row in range(len(labels))]}


def main(path: str) -> None:
    with open(path, encoding="utf-8") as handle:
        job = json.load(handle)
    tensors, info = {"load": load, "save": save, "equivalent": equivalent, "snippet": snippet}[job["job"]](job)
    safetensors.torch.save_file({k: v.contiguous() for k, v in tensors.items()}, job["out"])
    info["versions"] = {"adapters": adapters.__version__, "transformers": transformers.__version__}
    with open(job["out"] + ".json", "w", encoding="utf-8") as handle:
        json.dump(info, handle)


def serve() -> None:
    """Run the jobs named on stdin one after the other, paying for the imports once."""
    import traceback

    for line in sys.stdin:
        try:
            main(line.strip())
            answer = "ok"
        except Exception:  # the test reads the error and fails with it
            answer = "error " + json.dumps(traceback.format_exc())
        print(answer, flush=True)


if __name__ == "__main__":
    serve() if sys.argv[1] == "--serve" else main(sys.argv[1])
