"""Export to and import from the real libraries: AdapterHub's `adapters` (in its own environment, .venv-library,
through tests/library_side.py) and PEFT (in this one). Every comparison is of logits or hidden states computed by
the library itself against adapterlab's, with random non-zero adapter weights, at 1e-5."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import safetensors.torch
import torch

from adapterlab import cli
from adapterlab.backbones import STANDIN, TINY, load_backbone, standin_installed, standin_path
from adapterlab.checkpoints import load_adapter_set, save_adapter_set
from adapterlab.interop.convert import InteropError, export_set, folder_kind, import_set
from adapterlab.placement import adapted_outputs, add_adapters, apply_method

ROOT = Path(__file__).resolve().parent.parent
LIBRARY_SIDE = Path(__file__).resolve().parent / "library_side.py"
TOLERANCE = 1e-5


def library_python() -> Path | None:
    """The Python of the environment that holds AdapterHub's `adapters` (run.py test makes it), or None."""
    override = os.environ.get("ADAPTERLAB_LIBRARY_PYTHON")
    path = Path(override) if override else ROOT / ".venv-library" / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    return path if path.is_file() else None


@pytest.fixture(scope="session")
def adapterhub():
    """Run one job of tests/library_side.py in the library's environment: adapterhub(job, tmp_path) -> (tensors, info).
    One process serves the whole session, so its imports are paid once."""
    python = library_python()
    if python is None:
        pytest.skip("AdapterHub's environment .venv-library is missing: `bash benchmarks/library_env.sh` (or "
                    "`python3 run.py test`) makes it; set ADAPTERLAB_LIBRARY_PYTHON to use another")
    server = subprocess.Popen([str(python), str(LIBRARY_SIDE), "--serve"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"})

    def run(job: dict, folder: Path):
        job = {**job, "out": str(folder / f"{job['job']}-out.safetensors")}
        path = folder / f"{job['job']}-job.json"
        path.write_text(json.dumps(job))
        server.stdin.write(f"{path}\n")
        server.stdin.flush()
        answer = server.stdout.readline().strip()
        if not answer:
            error = server.stderr.read()
            if "No module named 'adapters'" in error:
                pytest.skip(f"{python} cannot import adapters")
            raise AssertionError(f"the library's process ended: {error[-3000:]}")
        assert answer == "ok", json.loads(answer.removeprefix("error "))
        return safetensors.torch.load_file(job["out"]), json.loads(Path(job["out"] + ".json").read_text())

    yield run
    server.stdin.close()
    server.wait(timeout=60)


def _batch(vocab: int = 30522) -> dict:
    generator = torch.Generator().manual_seed(7)
    ids = torch.randint(1000, vocab, (3, 9), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    ids[mask == 0] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _randomize(model, *, layernorms: bool = False, pooler: bool = False, seed: int = 3) -> None:
    """Random non-zero values for everything a set saves, so that a misplaced or missing tensor shows."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            trained = (".adapter." in name or ".lora_" in name or name.startswith("classifier.")
                       or (layernorms and ".LayerNorm." in name) or (pooler and ".pooler." in name))
            if trained:
                parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.2)


def _tiny():
    return load_backbone(TINY, num_labels=2, seed=0)


@pytest.fixture
def base_folder(tmp_path):
    """The tiny random backbone as a transformers folder, for the library's side to start from the same weights."""
    model, _, _ = _tiny()
    model.save_pretrained(tmp_path / "base")
    return tmp_path / "base"


def _our_set(tmp_path, method: str, **settings):
    """A trained-looking adapterlab set on the tiny backbone: (run folder, its logits on the batch)."""
    model, _, info = _tiny()
    extra_kinds = {k: settings.pop(k) for k in ("randomize_layernorms",) if k in settings}
    apply_method(model, method, **settings)
    _randomize(model, layernorms=extra_kinds.get("randomize_layernorms", False),
               pooler=settings.get("train_pooler", False))
    folder = save_adapter_set(model, tmp_path / f"run-{method}", backbone=info, extra={"task": "sst2", "seed": 0})
    with torch.no_grad():
        logits = model(**_batch()).logits
    return folder, logits


def _batch_file(tmp_path) -> str:
    path = tmp_path / "batch.safetensors"
    safetensors.torch.save_file(_batch(), str(path))
    return str(path)


def _evaluate_imported(folder) -> torch.Tensor:
    model, _, _ = _tiny()
    load_adapter_set(model, folder)
    with torch.no_grad():
        return model(**_batch()).logits


# --------------------------------------------------------------------------------------------------
# AdapterHub
# --------------------------------------------------------------------------------------------------

ADAPTER_CASES = {
    "houlsby": dict(method="houlsby", bottleneck=4, activation="gelu", train_layernorm=False),
    "pfeiffer, some layers, no biases": dict(method="pfeiffer", bottleneck=8, activation="relu", layers=[1],
                                             bias=False, train_layernorm=False),
    "parallel, r not dividing d": dict(method="parallel", bottleneck=5, activation="silu", train_layernorm=False),
    "houlsby, LayerNorms and pooler trained": dict(method="houlsby", bottleneck=4, activation="tanh",
                                                   train_layernorm=True, train_pooler=True, randomize_layernorms=True),
}


@pytest.mark.parametrize("case", list(ADAPTER_CASES))
def test_an_exported_adapter_set_loads_in_adapterhub_with_the_same_logits(case, tmp_path, base_folder, adapterhub):
    settings = dict(ADAPTER_CASES[case])
    trained_backbone = settings.get("train_layernorm") or settings.get("train_pooler")
    run, ours = _our_set(tmp_path, **settings)
    out = export_set(run, "adapterhub", tmp_path / "hub", backbone_tensors=bool(trained_backbone))
    assert folder_kind(out) == "adapterhub" and not list(out.glob("*.bin"))
    # a trained pooler goes as AdapterHub's classification head, which an AutoAdapterModel loads with the adapter
    job = {"job": "load", "base": str(base_folder), "folder": str(out), "batch": _batch_file(tmp_path),
           "flexible": bool(settings.get("train_pooler"))}
    if settings.get("train_layernorm"):
        job["backbone_tensors"] = str(out / "trained_backbone.safetensors")
    tensors, info = adapterhub(job, tmp_path)
    assert info["name"] == "sst2"
    assert (tensors["logits"] - ours).abs().max().item() <= TOLERANCE
    base, _, _ = _tiny()
    with torch.no_grad():  # the adapters matter: the backbone alone computes something else
        assert (base(**_batch()).logits - ours).abs().max().item() > 1e-3


def test_a_set_with_trained_layernorms_is_refused_without_the_flag_that_ships_them(tmp_path):
    run, _ = _our_set(tmp_path, "pfeiffer", bottleneck=4, train_layernorm=True)
    with pytest.raises(InteropError, match="LayerNorms.*--backbone-tensors.*--no-train-layernorm"):
        export_set(run, "adapterhub", tmp_path / "hub")
    assert not (tmp_path / "hub").exists()


@pytest.mark.parametrize(("method", "settings", "to", "message"), [
    ("lora", {"lora_targets": "all_dense"}, "adapterhub", "no place for a LoRA on attention.output.dense.*--to peft"),
    ("houlsby", {"train_layernorm": False}, "peft", "houlsby adapter set: export it with --to adapterhub"),
    ("bitfit", {}, "peft", "bitfit set, which neither library has a format for"),
    ("bitfit", {}, "adapterhub", "bitfit set, which neither library has a format for"),
])
def test_what_a_library_cannot_hold_is_an_error_that_says_what_to_do(method, settings, to, message, tmp_path):
    run, _ = _our_set(tmp_path, method, **settings)
    with pytest.raises(InteropError, match=message):
        export_set(run, to, tmp_path / "out")


LIBRARY_SAVES = {
    "DoubleSeqBn": ("DoubleSeqBnConfig", {"reduction_factor": 8}, "houlsby"),
    "SeqBn, leave_out": ("SeqBnConfig", {"reduction_factor": 4, "leave_out": [0]}, "pfeiffer"),
    "ParBn": ("ParBnConfig", {"reduction_factor": 4, "non_linearity": "gelu"}, "parallel"),
}


@pytest.mark.parametrize("case", list(LIBRARY_SAVES))
def test_an_adapter_saved_by_adapterhub_imports_with_the_same_logits(case, tmp_path, base_folder, adapterhub):
    preset, settings, placement = LIBRARY_SAVES[case]
    folder = tmp_path / "saved"
    tensors, _ = adapterhub({"job": "save", "base": str(base_folder), "folder": str(folder), "preset": preset,
                             "settings": settings, "name": "sst2", "seed": 5, "scale": 0.2,
                             "batch": _batch_file(tmp_path)}, tmp_path)
    out, summary = import_set(folder, tmp_path / "imported", backbone=TINY)
    assert summary == {"kind": "adapterhub", "method": placement, "backbone": TINY, "task": "sst2"}
    assert (_evaluate_imported(out) - tensors["logits"]).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize(("settings", "message"), [
    ({"original_ln_before": False}, "reads the FFN's own output, not the output of its Add & Norm"),
    ({"ln_after": True}, "ln_after"),
    ({"non_linearity": "gelu_new"}, "nonlinearity 'gelu_new'"),
])
def test_an_adapterhub_adapter_no_placement_computes_is_refused(settings, message, tmp_path, base_folder, adapterhub):
    folder = tmp_path / "saved"
    adapterhub({"job": "save", "base": str(base_folder), "folder": str(folder), "preset": "SeqBnConfig",
                "settings": {"reduction_factor": 4, **settings}, "name": "sst2", "seed": 5, "scale": 0.2,
                "batch": _batch_file(tmp_path)}, tmp_path)
    with pytest.raises(InteropError, match=message):
        import_set(folder, tmp_path / "imported", backbone=TINY)
    assert not (tmp_path / "imported").exists()


def test_an_adapterhub_round_trip_gives_back_the_same_set(tmp_path):
    run, ours = _our_set(tmp_path, "pfeiffer", bottleneck=8, train_layernorm=True, train_pooler=True,
                         randomize_layernorms=True)
    hub = export_set(run, "adapterhub", tmp_path / "hub", backbone_tensors=True)
    out, summary = import_set(hub, tmp_path / "back")
    assert summary["method"] == "pfeiffer" and summary["task"] == "sst2"
    assert (_evaluate_imported(out) - ours).abs().max().item() <= TOLERANCE


def test_a_lora_of_query_and_value_goes_to_adapterhub_and_back(tmp_path, base_folder, adapterhub):
    run, ours = _our_set(tmp_path, "lora", lora_rank=4, lora_alpha=12.0)
    out = export_set(run, "adapterhub", tmp_path / "hub")
    tensors, _ = adapterhub({"job": "load", "base": str(base_folder), "folder": str(out),
                             "batch": _batch_file(tmp_path)}, tmp_path)
    assert (tensors["logits"] - ours).abs().max().item() <= TOLERANCE
    back, summary = import_set(out, tmp_path / "back")
    assert summary["method"] == "lora"
    assert (_evaluate_imported(back) - ours).abs().max().item() <= TOLERANCE


@pytest.mark.parametrize("version", ["adapters.1.3.0", "adapters.1.0.1"])
def test_a_lora_saved_by_adapterhub_imports_as_the_library_reads_it(version, tmp_path, base_folder, adapterhub):
    """A LoRA config of a version below 1.1.0 is read by the library with alpha reset to r: so is it here."""
    folder = tmp_path / "saved"
    adapterhub({"job": "save", "base": str(base_folder), "folder": str(folder), "preset": "LoRAConfig",
                "settings": {"r": 4, "alpha": 16, "attn_matrices": ["q", "v"]}, "name": "sst2", "seed": 5,
                "scale": 0.2, "batch": _batch_file(tmp_path)}, tmp_path)
    config = json.loads((folder / "adapter_config.json").read_text())
    (folder / "adapter_config.json").write_text(json.dumps({**config, "version": version}))
    tensors, _ = adapterhub({"job": "load", "base": str(base_folder), "folder": str(folder),
                             "batch": _batch_file(tmp_path)}, tmp_path)
    out, _ = import_set(folder, tmp_path / "imported", backbone=TINY)
    assert (_evaluate_imported(out) - tensors["logits"]).abs().max().item() <= TOLERANCE
    assert json.loads((out / "adapter_config.json").read_text())["lora"]["alpha"] == (16 if version.endswith("1.3.0") else 4)


# --------------------------------------------------------------------------------------------------
# PEFT
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def peft():
    return pytest.importorskip("peft", reason="PEFT is not installed here (it is in the test extras: pip install -e .[test])")


@pytest.mark.parametrize("settings", [dict(lora_rank=4, lora_alpha=8.0),
                                      dict(lora_rank=2, lora_alpha=3.0, lora_targets="all_dense", train_pooler=True)])
def test_an_exported_lora_set_loads_in_peft_with_the_same_logits(settings, tmp_path, peft):
    run, ours = _our_set(tmp_path, "lora", **settings)
    out = export_set(run, "peft", tmp_path / "peft")
    assert folder_kind(out) == "peft"
    base, _, _ = _tiny()
    model = peft.PeftModel.from_pretrained(base, str(out)).eval()
    wrapped = [name for name, module in model.named_modules() if isinstance(module, peft.tuners.lora.LoraLayer)]
    assert wrapped and not any("pooler" in name for name in wrapped)  # a suffix 'dense' would wrap the pooler
    with torch.no_grad():
        assert (model(**_batch()).logits - ours).abs().max().item() <= TOLERANCE
    back, _ = import_set(out, tmp_path / "back")
    assert (_evaluate_imported(back) - ours).abs().max().item() <= TOLERANCE


def _peft_saved(tmp_path, peft, **lora):
    base, _, _ = _tiny()
    model = peft.get_peft_model(base, peft.LoraConfig(task_type="SEQ_CLS", **lora)).eval()
    _randomize(model)
    with torch.no_grad():
        logits = model(**_batch()).logits
    model.save_pretrained(str(tmp_path / "saved"))
    return tmp_path / "saved", logits


def test_a_lora_saved_by_peft_imports_with_the_same_logits(tmp_path, peft):
    folder, theirs = _peft_saved(tmp_path, peft, r=4, lora_alpha=16, target_modules=["query", "value"])
    out, summary = import_set(folder, tmp_path / "imported", backbone=TINY, task="sst2")
    assert summary["method"] == "lora"
    assert (_evaluate_imported(out) - theirs).abs().max().item() <= TOLERANCE


# --------------------------------------------------------------------------------------------------
# The command line
# --------------------------------------------------------------------------------------------------


def test_export_then_import_then_evaluate_on_the_command_line(tmp_path, capsys):
    run, _ = _our_set(tmp_path, "lora", lora_rank=2)
    assert cli.main(["export", str(run), "--to", "peft", "--out", str(tmp_path / "peft")]) == 0
    assert "PeftModel.from_pretrained" in capsys.readouterr().out
    assert cli.main(["import", str(tmp_path / "peft"), "--out", str(tmp_path / "back")]) == 0
    assert cli.main(["evaluate", "--checkpoint", str(tmp_path / "back"), "--max-eval", "8"]) == 0
    assert '"task": "sst2"' in capsys.readouterr().out
    assert cli.main(["import", str(run), "--out", str(tmp_path / "again")]) == 2
    assert "already an adapterlab adapter set" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "peft"), "--to", "adapterhub", "--out", str(tmp_path / "x")]) == 2
    assert "is a PEFT adapter folder, not an adapterlab run folder" in capsys.readouterr().err


def test_adapterlab_reading_a_library_folder_says_what_it_is(tmp_path):
    run, _ = _our_set(tmp_path, "lora", lora_rank=2)
    out = export_set(run, "peft", tmp_path / "peft")
    model, _, _ = _tiny()
    with pytest.raises(ValueError, match="PEFT adapter folder.*adapterlab import"):
        load_adapter_set(model, out)


# --------------------------------------------------------------------------------------------------
# The same computation: adapterlab's placements and LoRA against the libraries' presets, on the stand-in
# --------------------------------------------------------------------------------------------------

EQUIVALENCE = {  # placement, AdapterHub preset with adapterlab's settings (d = 384, r = 24)
    "houlsby": ("DoubleSeqBnConfig", {"reduction_factor": 16, "non_linearity": "gelu"}),
    "pfeiffer": ("SeqBnConfig", {"reduction_factor": 16, "non_linearity": "gelu"}),
    "parallel": ("ParBnConfig", {"reduction_factor": 16, "non_linearity": "gelu", "scaling": 4.0}),
}


def _standin_inputs():
    if not standin_installed():
        pytest.skip(f"the stand-in {STANDIN} is not installed")
    model, tokenizer, _ = load_backbone(STANDIN, num_labels=2)
    batch = tokenizer(["a gripping, beautifully acted film", "the plot is thin and the jokes fall flat",
                       "it rains"], padding=True, return_tensors="pt")
    return model.eval(), {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}


@pytest.mark.parametrize("placement", list(EQUIVALENCE))
def test_each_placement_computes_what_its_adapterhub_preset_computes(placement, tmp_path, adapterhub):
    model, batch = _standin_inputs()
    add_adapters(model, placement, 24, activation="gelu", init="bert")
    _randomize(model)
    with torch.no_grad():
        ours = model.bert(**batch).last_hidden_state
    weights = {name.removeprefix("bert."): p.detach().contiguous() for name, p in model.named_parameters()
               if ".adapter." in name}
    safetensors.torch.save_file(weights, str(tmp_path / "weights.safetensors"))
    safetensors.torch.save_file(batch, str(tmp_path / "batch.safetensors"))
    preset, settings = EQUIVALENCE[placement]
    tensors, _ = adapterhub({"job": "equivalent", "base": str(standin_path()), "preset": preset, "settings": settings,
                             "weights": str(tmp_path / "weights.safetensors"),
                             "batch": str(tmp_path / "batch.safetensors")}, tmp_path)
    assert (tensors["hidden"] - ours).abs().max().item() <= TOLERANCE
    if placement == "pfeiffer":  # the FFN half of Houlsby (what "pfeiffer" once computed) is another computation
        for _, _, adapted in adapted_outputs(model):
            adapted.reads_add_norm = False
        with torch.no_grad():
            assert (tensors["hidden"] - model.bert(**batch).last_hidden_state).abs().max().item() > 1e-2


def test_lora_computes_what_peft_computes(tmp_path, peft):
    model, batch = _standin_inputs()
    base = load_backbone(STANDIN, num_labels=2)[0].eval()
    apply_method(model, "lora", lora_rank=8, lora_alpha=16.0)
    _randomize(model)
    theirs = peft.get_peft_model(base, peft.LoraConfig(r=8, lora_alpha=16, target_modules=["query", "value"])).eval()
    params = dict(theirs.named_parameters())
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".lora_" in name:
                params[f"base_model.model.{name}.default.weight"].copy_(parameter)
        difference = (theirs.base_model.model.bert(**batch).last_hidden_state
                      - model.bert(**batch).last_hidden_state).abs().max().item()
    assert difference <= TOLERANCE
