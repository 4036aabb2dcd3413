"""The folders library users really have, made with the libraries' own API and saved with their own save methods
(PEFT here, AdapterHub's `adapters` in its own environment through tests/library_side.py): each imports with the
library's logits (random non-zero weights, 1e-5) or is refused with a message naming the fix; none imports
silently different."""

from __future__ import annotations

import json
import re

import pytest
import safetensors.torch
import torch

from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import save_adapter_set
from adapterlab.interop.convert import InteropError, export_set, import_set
from adapterlab.placement import apply_method
from test_interop import TOLERANCE, _batch, _batch_file, _evaluate_imported, _tiny, adapterhub, base_folder  # noqa: F401 (fixtures)

peft = pytest.importorskip("peft", reason="PEFT is not installed here (it is in the test extras: pip install -e .[test])")

ALL_DENSE = ["query", "key", "value", "attention.output.dense", "intermediate.dense", "output.dense"]


def _noise(model, seed: int = 3) -> None:
    """Random non-zero values added to everything the library trains (adapter and classifier)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, parameter in model.named_parameters():
            if parameter.requires_grad:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.2)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(**_batch()).logits


def _saved(tmp_path, config, *, num_labels: int = 2, **save):
    """A PEFT model of `config` on the tiny backbone, trained-looking, saved by save_pretrained: (folder, logits)."""
    base, _, _ = load_backbone(TINY, num_labels=num_labels, seed=0)
    model = peft.get_peft_model(base, config).eval()
    _noise(model)
    model.save_pretrained(str(tmp_path / "saved"), **save)
    return tmp_path / "saved", _logits(model)


def _imports_equal(folder, theirs, tmp_path) -> dict:
    out, summary = import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert (_evaluate_imported(out) - theirs).abs().max().item() <= TOLERANCE
    assert (_logits(_tiny()[0]) - theirs).abs().max().item() > 1e-3  # the adapter matters
    return summary


def _lora(**settings):
    return peft.LoraConfig(**{"task_type": "SEQ_CLS", "r": 4, "lora_alpha": 8, **settings})


# --------------------------------------------------------------------------------------------------
# PEFT LoRA: the same model in other words
# --------------------------------------------------------------------------------------------------

PEFT_EQUAL = {
    "dropout": dict(target_modules=["query", "value"], lora_dropout=0.1),
    "every dense layer, named one by one": dict(target_modules=ALL_DENSE),
    "query and value by a regex": dict(target_modules=r".*\.(query|value)"),
    "use_rslora": dict(target_modules=["query", "value"], use_rslora=True),
    "layers_to_transform": dict(target_modules=["query", "value"], layers_to_transform=[1]),
    "rank_pattern and alpha_pattern": dict(target_modules=["query", "value"], rank_pattern={"value": 2},
                                           alpha_pattern={"query": 3}),
    "no task_type, the classifier saved": dict(task_type=None, target_modules=["query", "value"],
                                               modules_to_save=["classifier"]),
    "layers_to_transform = 0": dict(target_modules=["query", "value"], layers_to_transform=0),
    "a regex limited to the first layer": dict(target_modules=r"bert\.encoder\.layer\.0\.attention\.self\.(query|value)"),
    "every dense layer, the pooler's excluded": dict(target_modules=["query", "key", "value", "dense"],
                                                     exclude_modules=["pooler.dense"]),
    "the pooler trained, saved as pooler.dense": dict(target_modules=["query", "value"],
                                                      modules_to_save=["classifier", "pooler.dense"]),
    "query, key and value": dict(target_modules=["query", "key", "value"]),
    "query and key": dict(target_modules=["query", "key"]),
}


@pytest.mark.parametrize("case", list(PEFT_EQUAL))
def test_a_peft_lora_that_is_adapterlabs_lora_imports_with_the_same_logits(case, tmp_path):
    folder, theirs = _saved(tmp_path, _lora(**PEFT_EQUAL[case]))
    summary = _imports_equal(folder, theirs, tmp_path)
    assert summary["method"] == "lora"
    if case == "dropout":
        assert "training only" in summary["notes"][0]
    if "key" in case:  # the modules PEFT did not adapt come in with zero matrices, and import says so
        assert any("all_dense, with zero matrices on" in note and "attention.output.dense" in note
                   for note in summary["notes"])


def test_an_adapter_saved_under_its_own_name_is_found_in_its_folder(tmp_path):
    base, _, _ = load_backbone(TINY, num_labels=2, seed=0)
    model = peft.get_peft_model(base, _lora(target_modules=["query", "value"]), adapter_name="other").eval()
    _noise(model)
    model.save_pretrained(str(tmp_path / "saved"), selected_adapters=["other"])
    with pytest.raises(InteropError, match=r"its folder other does.*import .*saved/other"):
        import_set(tmp_path / "saved", tmp_path / "imported", backbone=TINY, task="sst2")
    _imports_equal(tmp_path / "saved" / "other", _logits(model), tmp_path)  # where the message points


def test_a_peft_folder_saved_as_a_pickle_is_read_without_running_code(tmp_path):
    folder, theirs = _saved(tmp_path, _lora(target_modules=["query", "value"]), safe_serialization=False)
    assert (folder / "adapter_model.bin").is_file() and not (folder / "adapter_model.safetensors").exists()
    _imports_equal(folder, theirs, tmp_path)


class Payload:
    """Anything but a tensor: torch's restricted unpickler refuses to build it."""


def test_a_pickle_holding_more_than_tensors_is_refused(tmp_path):
    folder, _ = _saved(tmp_path, _lora(target_modules=["query", "value"]), safe_serialization=False)
    tensors = torch.load(folder / "adapter_model.bin", weights_only=True)
    torch.save({**tensors, "payload": Payload()}, folder / "adapter_model.bin")
    with pytest.raises(InteropError, match="weights_only=True refused it.*safe_serialization=True"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert not (tmp_path / "imported").exists()


@pytest.mark.parametrize("init", ["pissa", "pissa_niter_2", "olora"])
def test_a_lora_whose_init_rewrites_the_base_weights_is_refused_with_peft_s_conversion(init, tmp_path):
    folder, theirs = _saved(tmp_path, _lora(target_modules=["query", "value"], init_lora_weights=init))
    with pytest.raises(InteropError, match=f"init_lora_weights = '{init}' rewrites.*path_initial_model_for_weight_conversion"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    if "niter" not in init:  # PEFT redoes the rewrite at load (exactly, but for the randomized SVD's)
        reloaded = peft.PeftModel.from_pretrained(load_backbone(TINY, num_labels=2, seed=0)[0], str(folder)).eval()
        assert (_logits(reloaded) - theirs).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("init", ["pissa", "olora"])
def test_a_lora_converted_as_peft_documents_imports_with_the_same_logits(init, tmp_path):
    base, _, _ = load_backbone(TINY, num_labels=2, seed=0)
    model = peft.get_peft_model(base, _lora(target_modules=["query", "value"], init_lora_weights=init)).eval()
    model.peft_config["default"].init_lora_weights = True
    model.save_pretrained(str(tmp_path / "initial"))
    model.peft_config["default"].init_lora_weights = init
    _noise(model)
    model.save_pretrained(str(tmp_path / "plain"))
    model.save_pretrained(str(tmp_path / "saved"), path_initial_model_for_weight_conversion=str(tmp_path / "initial"))
    with pytest.raises(InteropError, match="no classifier.*copy base_model.model.classifier"):
        import_set(tmp_path / "saved", tmp_path / "imported", backbone=TINY, task="sst2")
    converted = safetensors.torch.load_file(str(tmp_path / "saved" / "adapter_model.safetensors"))
    head = {k: v for k, v in safetensors.torch.load_file(str(tmp_path / "plain" / "adapter_model.safetensors")).items()
            if ".classifier." in k}  # what the message says to do
    safetensors.torch.save_file({**converted, **head}, str(tmp_path / "saved" / "adapter_model.safetensors"))
    _imports_equal(tmp_path / "saved", _logits(model), tmp_path)


@pytest.mark.parametrize("init", ["corda", "loftq", "lora_ga"])
def test_every_init_that_rewrites_the_base_is_refused(init, tmp_path):
    """CorDA, LoftQ and LoRA-GA need data or a quantizer to make; their folders differ from a plain one in the
    config's init_lora_weights alone."""
    folder, _ = _saved(tmp_path, _lora(target_modules=["query", "value"]))
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "init_lora_weights": init}))
    with pytest.raises(InteropError, match=f"'{init}' rewrites the base model's weights"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")


@pytest.mark.parametrize(("settings", "message"), [
    (dict(target_modules=["query", "key", "value", "dense"]), "adapts bert.pooler.dense"),
])
def test_a_peft_lora_adapting_other_modules_is_refused(settings, message, tmp_path):
    folder, _ = _saved(tmp_path, _lora(**settings))
    with pytest.raises(InteropError, match=message):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")


@pytest.mark.parametrize("targets", [["query", "value"], ["query", "value", "intermediate.dense"]])
def test_a_peft_vera_imports_as_a_lora_with_the_same_logits(targets, tmp_path):
    """VeRA's shared projections, sliced to each module's size and scaled by the trained vectors, are a LoRA."""
    folder, theirs = _saved(tmp_path, peft.VeraConfig(task_type="SEQ_CLS", r=4, target_modules=targets))
    summary = _imports_equal(folder, theirs, tmp_path)
    assert summary["method"] == "lora" and any("VeRA comes in as adapterlab's LoRA of r = 4" in note
                                               for note in summary["notes"])


def test_a_peft_vera_saved_without_its_projections_is_refused_naming_the_option(tmp_path):
    folder, _ = _saved(tmp_path, peft.VeraConfig(task_type="SEQ_CLS", r=4, target_modules=["query", "value"],
                                                 save_projection=False))
    with pytest.raises(InteropError, match="save_projection=True"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert not (tmp_path / "imported").exists()


def test_a_classifier_for_another_label_count_is_refused_at_import(tmp_path):
    folder, _ = _saved(tmp_path, _lora(target_modules=["query", "value"]), num_labels=3)
    with pytest.raises(InteropError, match="3 labels, the task sst2 has 2"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert not (tmp_path / "imported").exists()


# --------------------------------------------------------------------------------------------------
# PEFT IA3: adapterlab's ia3, both ways
# --------------------------------------------------------------------------------------------------

def test_a_peft_ia3_on_adapterlabs_sites_imports_with_the_same_logits(tmp_path):
    config = peft.IA3Config(task_type="SEQ_CLS", target_modules=r".*\.(key|value|\d+\.output\.dense)",
                            feedforward_modules=r".*\.\d+\.output\.dense")
    folder, theirs = _saved(tmp_path, config)
    assert _imports_equal(folder, theirs, tmp_path)["method"] == "ia3"


def test_peft_s_default_ia3_for_bert_is_refused(tmp_path):
    """PEFT's default for BERT names output.dense, which also matches attention.output.dense."""
    folder, _ = _saved(tmp_path, peft.IA3Config(task_type="SEQ_CLS"))
    with pytest.raises(InteropError, match=r"attention.output.dense.*adapterlab's ia3 has no place.*matches "
                                           r"attention.output.dense too: save it again with target_modules=r'"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")


def test_an_ia3_set_exports_to_peft_with_the_same_logits(tmp_path):
    model, _, info = _tiny()
    apply_method(model, "ia3")
    _noise(model)
    run = save_adapter_set(model, tmp_path / "run", backbone=info, extra={"task": "sst2", "seed": 0})
    out = export_set(run, "peft", tmp_path / "peft")
    loaded = peft.PeftModel.from_pretrained(load_backbone(TINY, num_labels=2, seed=0)[0], str(out)).eval()
    assert (_logits(loaded) - _logits(model)).abs().max().item() <= TOLERANCE
    back, _ = import_set(out, tmp_path / "back")
    assert (_evaluate_imported(back) - _logits(model)).abs().max().item() <= TOLERANCE


# --------------------------------------------------------------------------------------------------
# AdapterHub: its presets, heads and save methods
# --------------------------------------------------------------------------------------------------

def _hub_saved(adapterhub, tmp_path, base_folder, preset: str, settings: dict, **job):
    """An adapter saved by AdapterHub's own save method, and the library's logits: (folder, logits)."""
    folder = tmp_path / "saved"
    tensors, _ = adapterhub({"job": "save", "base": str(base_folder), "folder": str(folder), "preset": preset,
                             "settings": settings, "name": "sst2", "seed": 5, "scale": 0.2,
                             "batch": _batch_file(tmp_path), **job}, tmp_path)
    return folder, tensors["logits"]


DEFAULT_HEAD = {"num_labels": 2}  # add_classification_head's defaults: layers=2, tanh, the first token
HUB_EQUAL = {
    "DoubleSeqBn, residual_before_ln=False": ("DoubleSeqBnConfig", {"reduction_factor": 8,
                                                                     "residual_before_ln": False}, {}),
    "SeqBn scaled by a number": ("SeqBnConfig", {"reduction_factor": 4, "scaling": 0.5}, {}),
    "SeqBn, learned scaling": ("SeqBnConfig", {"reduction_factor": 4, "scaling": "learned"}, {}),
    "SeqBn, a scale per channel": ("SeqBnConfig", {"reduction_factor": 4, "scaling": "channel"}, {}),
    "ParBn, learned scaling": ("ParBnConfig", {"reduction_factor": 4, "scaling": "learned"}, {}),
    "SeqBn with dropout": ("SeqBnConfig", {"reduction_factor": 4, "dropout": 0.1}, {}),
    "the default classification head": ("SeqBnConfig", {"reduction_factor": 4}, {"head": DEFAULT_HEAD}),
    "a one-layer head on the pooler": ("DoubleSeqBnConfig", {"reduction_factor": 4},
                                       {"head": {"num_labels": 2, "layers": 1, "use_pooler": True}}),
    "save_adapter_setup's top folder": ("ParBnConfig", {"reduction_factor": 4}, {"head": DEFAULT_HEAD, "setup": True}),
    "pytorch_adapter.bin": ("SeqBnConfig", {"reduction_factor": 4}, {"use_safetensors": False}),
    "LoRA with dropout": ("LoRAConfig", {"r": 4, "alpha": 8, "attn_matrices": ["q", "v"], "dropout": 0.1}, {}),
    "LoRA on query, key and value": ("LoRAConfig", {"r": 4, "alpha": 8, "attn_matrices": ["q", "k", "v"]}, {}),
    "LoRA on the FFN too, a layer left out": ("LoRAConfig", {"r": 4, "alpha": 16, "attn_matrices": ["q", "v"],
                                                             "intermediate_lora": True, "output_lora": True,
                                                             "leave_out": [0]}, {}),
    "a bottleneck per layer": ("SeqBnConfig", {"reduction_factor": {"0": 4, "1": 8, "default": 4}}, {}),
    "DoubleSeqBn, a bottleneck per layer": ("DoubleSeqBnConfig", {"reduction_factor": {"1": 16, "default": 2}}, {}),
    "VeRA on query and value": ("VeraConfig", {"r": 4}, {}),
}
#: What import says of a folder it takes as another adapterlab set that computes the same.
HUB_NOTES = {"LoRA on query, key and value": "all_dense, with zero matrices on attention.output.dense",
             "LoRA on the FFN too, a layer left out": "leaves out \\(\\[0\\]\\) get zero matrices",
             "a bottleneck per layer": "padded with zero units to r = ",
             "DoubleSeqBn, a bottleneck per layer": "differs between layers",
             "VeRA on query and value": "VeRA comes in as adapterlab's LoRA of r = 4"}


@pytest.mark.parametrize("case", list(HUB_EQUAL))
def test_an_adapterhub_folder_that_is_an_adapterlab_set_imports_with_the_same_logits(case, tmp_path, base_folder,
                                                                                     adapterhub):
    preset, settings, job = HUB_EQUAL[case]
    folder, theirs = _hub_saved(adapterhub, tmp_path, base_folder, preset, settings, **job)
    summary = _imports_equal(folder, theirs, tmp_path)
    if "dropout" in settings:
        assert "training only" in summary["notes"][0]
    if case in HUB_NOTES:
        assert any(re.search(HUB_NOTES[case], note) for note in summary["notes"])


@pytest.mark.parametrize("kind", ["Stack", "Fuse", "Parallel"])
def test_a_setup_of_several_adapters_is_refused_as_another_model_not_as_one_to_pick(kind, tmp_path):
    """save_adapter_setup's top folder for a composition, as adapters 1.3 writes it (composition.to_dict): importing
    one of its adapters gives another model, and the message must not suggest otherwise."""
    folder = tmp_path / "setup"
    for name in ("a", "b"):
        (folder / name).mkdir(parents=True)
    single = [{"type": "single", "children": [name]} for name in ("a", "b")]
    (folder / "adapter_setup.json").write_text(json.dumps(
        {"adapter_setup": {"type": kind, "children": single}, "head_setup": None, "version": "adapters.1.3.0"}))
    with pytest.raises(InteropError, match=rf"AdapterHub {kind} of the adapters \['a', 'b'\].*no import gives the "
                                           r"saved setup's outputs.*a different model"):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")


HUB_REFUSED = {
    "SeqBn, residual after the Add & Norm": ("SeqBnConfig", {"reduction_factor": 4, "residual_before_ln": False},
                                             {}, "no adapterlab placement computes"),
    "a three-layer head": ("SeqBnConfig", {"reduction_factor": 4}, {"head": {"num_labels": 2, "layers": 3}},
                           "layers=3.*add_classification_head"),
    "a ReLU head": ("SeqBnConfig", {"reduction_factor": 4},
                    {"head": {"num_labels": 2, "activation_function": "relu"}}, "activation_function='relu'"),
    "a head on the first token without the pooler": ("SeqBnConfig", {"reduction_factor": 4},
                                                     {"head": {"num_labels": 2, "layers": 1}}, "use_pooler=False"),
    "prefix tuning": ("PrefixTuningConfig", {}, {"head": {"num_labels": 2}, "use_safetensors": False},  # shared tensors
                      "a prefix_tuning adapter; adapterlab imports AdapterHub's bottleneck adapters"),
}


@pytest.mark.parametrize("case", list(HUB_REFUSED))
def test_an_adapterhub_folder_no_adapterlab_set_computes_is_refused_saying_why(case, tmp_path, base_folder, adapterhub):
    preset, settings, job, message = HUB_REFUSED[case]
    folder, _ = _hub_saved(adapterhub, tmp_path, base_folder, preset, settings, **job)
    with pytest.raises(InteropError, match=message):
        import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert not (tmp_path / "imported").exists()


def test_a_set_with_a_trained_pooler_exports_as_adapterhub_s_classification_head(tmp_path, base_folder, adapterhub):
    """AutoAdapterModel loads the pooler with the adapter; no extra step, so none to forget."""
    model, _, info = _tiny()
    apply_method(model, "pfeiffer", bottleneck=4, train_layernorm=False, train_pooler=True)
    _noise(model)
    run = save_adapter_set(model, tmp_path / "run", backbone=info, extra={"task": "sst2", "seed": 0})
    out = export_set(run, "adapterhub", tmp_path / "hub")
    assert not (out / "trained_backbone.safetensors").exists()
    tensors, _ = adapterhub({"job": "load", "base": str(base_folder), "folder": str(out), "flexible": True,
                             "batch": _batch_file(tmp_path)}, tmp_path)
    assert (tensors["logits"] - _logits(model)).abs().max().item() <= TOLERANCE
    assert "AutoAdapterModel" in (out / "README.md").read_text()


def test_trained_layernorms_travel_with_a_loading_step_that_cannot_be_missed(tmp_path, capsys):
    from adapterlab import cli

    model, _, info = _tiny()
    apply_method(model, "houlsby", bottleneck=4, train_layernorm=True)
    _noise(model)
    run = save_adapter_set(model, tmp_path / "run", backbone=info, extra={"task": "sst2", "seed": 0})
    assert cli.main(["export", str(run), "--to", "adapterhub", "--out", str(tmp_path / "hub"),
                     "--backbone-tensors"]) == 0
    printed = capsys.readouterr().out
    for text in (printed, (tmp_path / "hub" / "README.md").read_text()):
        assert "REQUIRED" in text and "trained_backbone.safetensors" in text
