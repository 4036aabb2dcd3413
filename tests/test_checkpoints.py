"""Adapter-set checkpoints: round trip, contents, size, every bad input, the config checksum, no unpickling,
and saves killed at every instant that still leave exactly the old or exactly the new set."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import safetensors.torch
import torch
import transformers

from adapterlab.checkpoints import (
    CONFIG_FILE,
    TENSORS_FILE,
    CheckpointError,
    flushed_to_zero,
    load_adapter_set,
    save_adapter_set,
    saved_parameters,
)
from adapterlab.placement import AdapterConfig, add_adapters, adapter_config


def trained(model, seed=7, **adapter_args):
    """Add adapters and move every trainable tensor away from its init, as training would."""
    add_adapters(model, **{"placement": "houlsby", "bottleneck": 4, **adapter_args})
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model


def logits(model, batch):
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits


def checksum(manifest: dict) -> str:
    """The manifest's checksum as its format defines it: SHA-256 of its canonical JSON without the checksum."""
    body = {key: value for key, value in manifest.items() if key != "checksum"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def rewrite_config(directory, change, reseal=True):
    """Edit the manifest; ``reseal`` records a matching checksum, so the loader's later checks are exercised."""
    path = Path(directory) / CONFIG_FILE
    manifest = json.loads(path.read_text())
    change(manifest)
    if reseal:
        manifest["checksum"] = checksum(manifest)
    path.write_text(json.dumps(manifest))


def resync_sha(directory):
    """Record the tensor file's current hash, so the loader's later checks are the ones exercised."""
    digest = hashlib.sha256((Path(directory) / TENSORS_FILE).read_bytes()).hexdigest()
    rewrite_config(directory, lambda manifest: manifest.update(sha256=digest))


@pytest.fixture
def saved(make_classifier, tmp_path):
    model = trained(make_classifier(seed=0))
    save_adapter_set(model, tmp_path / "set", backbone="tiny", extra={"task": "sst2", "accuracy": 0.5})
    return model, tmp_path / "set"


@pytest.mark.parametrize(
    "adapter_args",
    [
        {},
        {"placement": "pfeiffer", "layers": [0, 2], "train_layernorm": False},
        {"placement": "parallel", "activation": "relu", "parallel_scale": 2.0},
        {"placement": "pfeiffer", "train_pooler": True},
    ],
)
def test_round_trip_into_a_fresh_backbone_gives_identical_outputs(make_classifier, batch, tmp_path, adapter_args):
    model = trained(make_classifier(seed=0), **adapter_args)
    save_adapter_set(model, tmp_path)
    fresh = make_classifier(seed=0)
    assert not torch.allclose(logits(fresh, batch), logits(model, batch))
    result = load_adapter_set(fresh, tmp_path)
    assert torch.equal(logits(fresh, batch), logits(model, batch))
    assert adapter_config(fresh) == adapter_config(model)
    assert result["missing_keys"] == [] and result["unexpected_keys"] == []


def trained_layernorms(model) -> int:
    return sum(p.numel() for name, p in model.named_parameters() if p.requires_grad and "LayerNorm" in name)


def test_the_file_holds_exactly_what_the_adapter_method_trains(saved):
    model, directory = saved
    tensors = safetensors.torch.load_file(str(directory / TENSORS_FILE))
    assert set(tensors) == {name for name, p in model.named_parameters() if p.requires_grad}
    assert any("LayerNorm" in name for name in tensors)
    assert not any("pooler" in name for name in tensors)  # the pooler stays frozen by default
    # tiny BERT: d = 32, 3 layers, r = 4, Houlsby (2 adapters per layer), 2 labels; no pooler
    d, r, layers = 32, 4, 3
    closed_form = 2 * layers * (2 * r * d + r + d) + trained_layernorms(model) + (d * 2 + 2)
    assert sum(t.numel() for t in tensors.values()) == closed_form
    manifest = json.loads((directory / CONFIG_FILE).read_text())
    assert manifest["num_parameters"] == closed_form
    assert manifest["tensors"] == {name: list(t.shape) for name, t in tensors.items()}
    assert manifest["backbone"] == {"name": "tiny", "hidden_size": d, "num_layers": layers, "num_labels": 2}
    assert manifest["adapter"]["bottleneck"] == r and manifest["extra"] == {"task": "sst2", "accuracy": 0.5}


def test_frozen_layernorms_are_left_out(make_classifier, tmp_path):
    save_adapter_set(trained(make_classifier(), train_layernorm=False), tmp_path)
    names = safetensors.torch.load_file(str(tmp_path / TENSORS_FILE))
    assert names and not any("LayerNorm" in name for name in names)


def test_a_trained_pooler_is_saved_and_a_frozen_one_is_not(make_classifier, tmp_path):
    frozen, trained_pooler = trained(make_classifier()), trained(make_classifier(), train_pooler=True)
    save_adapter_set(frozen, tmp_path / "frozen")
    save_adapter_set(trained_pooler, tmp_path / "trained")
    read = lambda name: safetensors.torch.load_file(str(tmp_path / name / TENSORS_FILE))  # noqa: E731
    pooler = {name for name, _ in trained_pooler.named_parameters() if ".pooler." in f".{name}"}
    assert len(pooler) == 2
    assert set(read("trained")) - set(read("frozen")) == pooler and not pooler & set(read("frozen"))
    pooler_size = sum(p.numel() for p in trained_pooler.bert.pooler.parameters())
    numbers = lambda name: json.loads((tmp_path / name / CONFIG_FILE).read_text())["num_parameters"]  # noqa: E731
    assert numbers("trained") - numbers("frozen") == pooler_size == 32 * 32 + 32


def test_load_returns_the_saved_config_and_extra(saved, make_classifier):
    result = load_adapter_set(make_classifier(seed=0), saved[1])
    assert result["extra"] == {"task": "sst2", "accuracy": 0.5} and result["backbone"]["name"] == "tiny"


def test_float16_halves_the_file_and_loads_back_close(make_classifier, batch, tmp_path):
    model = trained(make_classifier(seed=0))
    save_adapter_set(model, tmp_path / "fp32")
    save_adapter_set(model, tmp_path / "fp16", dtype=torch.float16)
    half = safetensors.torch.load_file(str(tmp_path / "fp16" / TENSORS_FILE))
    assert {t.dtype for t in half.values()} == {torch.float16}
    numbers = json.loads((tmp_path / "fp32" / CONFIG_FILE).read_text())["num_parameters"]
    size = lambda name: (tmp_path / name / TENSORS_FILE).stat().st_size  # noqa: E731
    header = 64 * 1024
    assert 4 * numbers < size("fp32") < 4 * numbers + header
    assert 2 * numbers < size("fp16") < 2 * numbers + header
    fresh = make_classifier(seed=0)
    load_adapter_set(fresh, tmp_path / "fp16")
    assert next(fresh.classifier.parameters()).dtype == torch.float32
    torch.testing.assert_close(logits(fresh, batch), logits(model, batch), atol=1e-2, rtol=1e-2)


def test_bert_base_houlsby_r64_adapter_set_is_a_few_megabytes(tmp_path):
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(transformers.BertConfig())
    add_adapters(model, "houlsby", bottleneck=64)
    save_adapter_set(model, tmp_path)
    # adapters 2,379,264 (paper), the trained LayerNorms, 2-way classifier (the pooler stays frozen)
    numbers = 2_379_264 + trained_layernorms(model) + (768 * 2 + 2)
    size = (tmp_path / TENSORS_FILE).stat().st_size
    whole_model = 4 * sum(p.numel() for p in model.parameters())
    assert 4 * numbers < size < 4 * numbers + 64 * 1024
    assert size < 20e6 and size < whole_model / 30


def test_missing_directory(make_classifier, tmp_path):
    with pytest.raises(CheckpointError, match="no such folder"):
        load_adapter_set(make_classifier(), tmp_path / "nowhere")


@pytest.mark.parametrize("name", [CONFIG_FILE, TENSORS_FILE])
def test_missing_file_is_named(saved, make_classifier, name):
    (saved[1] / name).unlink()
    with pytest.raises(CheckpointError, match=f"{name} is missing"):
        load_adapter_set(make_classifier(), saved[1])


@pytest.mark.parametrize(
    "shape, wrong",
    [
        ({"hidden_size": 48}, "hidden_size 32 \\(this model: 48\\)"),
        ({"num_hidden_layers": 2}, "num_layers 3 \\(this model: 2\\)"),
        ({"num_labels": 3}, "num_labels 2 \\(this model: 3\\)"),
    ],
)
def test_backbone_of_another_shape_is_refused_and_says_which(saved, make_classifier, shape, wrong):
    other = make_classifier(**shape)
    with pytest.raises(CheckpointError, match=wrong):
        load_adapter_set(other, saved[1])
    assert adapter_config(other) is None


def test_truncated_tensor_file_is_refused(saved, make_classifier):
    path = saved[1] / TENSORS_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match=f"{TENSORS_FILE} does not match the sha256.*truncated"):
        load_adapter_set(make_classifier(), saved[1])


def test_truncated_tensor_file_with_a_matching_hash_is_still_refused(saved, make_classifier):
    """The hash ties the files together; safetensors' own checks must still catch a broken file."""
    path = saved[1] / TENSORS_FILE
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    resync_sha(saved[1])
    model = make_classifier()
    with pytest.raises(CheckpointError, match=f"{TENSORS_FILE} is not a readable safetensors file"):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None


def test_a_pickle_under_the_name_is_never_unpickled(saved, make_classifier, tmp_path):
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    (saved[1] / TENSORS_FILE).write_bytes(pickle.dumps({"classifier.weight": Payload()}))
    resync_sha(saved[1])
    with pytest.raises(CheckpointError, match="not a readable safetensors file"):
        load_adapter_set(make_classifier(), saved[1])
    assert not marker.exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "is not an adapterlab adapter set"),
    ],
)
def test_malformed_config_is_named(saved, make_classifier, text, message):
    (saved[1] / CONFIG_FILE).write_text(text)
    with pytest.raises(CheckpointError, match=f"{CONFIG_FILE} {message}"):
        load_adapter_set(make_classifier(), saved[1])


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda m: m.pop("backbone"), "'backbone' is missing"),
        (lambda m: m["backbone"].pop("num_layers"), "backbone.num_layers is missing"),
        (lambda m: m.update(format_version=99), "format_version 99"),
        (lambda m: m["adapter"].update(placement="sideways"), "cannot be applied.*placement"),
    ],
)
def test_config_with_wrong_content_is_named(saved, make_classifier, change, message):
    rewrite_config(saved[1], change)
    model = make_classifier()
    with pytest.raises(CheckpointError, match=message):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None


def test_tensor_shape_mismatch_names_the_tensor_and_leaves_the_model_unchanged(saved, make_classifier):
    rewrite_config(saved[1], lambda m: m["adapter"].update(bottleneck=8))
    model = make_classifier()
    message = r"tensor \S+\.adapter\.down\.\w+ has shape \[4.*\], the model expects \[8"
    with pytest.raises(CheckpointError, match=message):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None and all(p.requires_grad for p in model.parameters())


def test_model_with_other_adapters_is_refused_and_untouched(saved, make_classifier):
    model = add_adapters(make_classifier(), "houlsby", bottleneck=8)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(CheckpointError, match="already has adapters.*bottleneck: model 8, file 4"):
        load_adapter_set(model, saved[1])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_model_with_the_same_adapters_takes_the_weights(saved, make_classifier, batch):
    model = add_adapters(make_classifier(seed=0), "houlsby", bottleneck=4)
    load_adapter_set(model, saved[1])
    assert torch.equal(logits(model, batch), logits(saved[0], batch))


def test_strict_requires_every_tensor_and_non_strict_reports_the_gaps(saved, make_classifier):
    path = saved[1] / TENSORS_FILE
    tensors = safetensors.torch.load_file(str(path))
    del tensors["classifier.bias"]
    tensors["extra.weight"] = torch.zeros(1)
    safetensors.torch.save_file(tensors, str(path))
    resync_sha(saved[1])
    model = make_classifier()
    with pytest.raises(CheckpointError, match=r"missing \['classifier.bias'\], unexpected \['extra.weight'\]"):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None
    result = load_adapter_set(model, saved[1], strict=False)
    assert (result["missing_keys"], result["unexpected_keys"]) == (["classifier.bias"], ["extra.weight"])
    assert torch.equal(model.classifier.weight, saved[0].classifier.weight)


def test_saving_needs_adapters_and_json_extra(make_classifier, tmp_path):
    with pytest.raises(CheckpointError, match="no adapters"):
        save_adapter_set(make_classifier(), tmp_path)
    with pytest.raises(CheckpointError, match="extra must hold only JSON values"):
        save_adapter_set(trained(make_classifier()), tmp_path, extra={"when": object()})
    (tmp_path / "file").write_text("")
    with pytest.raises(CheckpointError, match="not a folder"):
        save_adapter_set(trained(make_classifier()), tmp_path / "file")


def test_a_full_disk_keeps_the_previous_set_and_leaves_no_temporary_file(saved, make_classifier, batch, monkeypatch):
    model, directory = saved
    real_write = os.write

    def disk_full(handle, data):
        real_write(handle, bytes(data)[:100])
        raise OSError("No space left on device")

    monkeypatch.setattr(os, "write", disk_full)
    with pytest.raises(OSError, match="No space left"):
        save_adapter_set(trained(make_classifier(seed=0), seed=99), directory)
    monkeypatch.undo()
    assert sorted(p.name for p in directory.iterdir()) == [CONFIG_FILE, TENSORS_FILE]
    fresh = make_classifier(seed=0)
    load_adapter_set(fresh, directory)
    assert torch.equal(logits(fresh, batch), logits(model, batch))


# ---------------------------------------------------------------------------------------------------
# bad dtypes and hand-edited configs
# ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype, why", [
    (torch.int8, "an integer, boolean or complex type"), (torch.int32, "an integer, boolean or complex type"),
    (torch.bool, "an integer, boolean or complex type"), (torch.complex64, "an integer, boolean or complex type"),
    ("float16", "a name, not a dtype: pass torch.float16"),
    (torch.float8_e4m3fn, "a set in it could not be loaded and run on a CPU"),
    (torch.float8_e5m2, "a set in it could not be loaded and run on a CPU"),
])
def test_only_dtypes_a_cpu_can_load_and_run_are_saved(make_classifier, tmp_path, dtype, why):
    with pytest.raises(CheckpointError, match=f"dtype must be one of torch.float16, torch.bfloat16, .*got {dtype!r}: {why}"):
        save_adapter_set(trained(make_classifier()), tmp_path / "set", dtype=dtype)
    assert not (tmp_path / "set").exists()


def test_bfloat16_is_a_floating_dtype(make_classifier, batch, tmp_path):
    model = trained(make_classifier(seed=0))
    save_adapter_set(model, tmp_path, dtype=torch.bfloat16)
    fresh = make_classifier(seed=0)
    load_adapter_set(fresh, tmp_path)
    torch.testing.assert_close(logits(fresh, batch), logits(model, batch), atol=5e-2, rtol=5e-2)


def test_integer_weights_in_the_file_are_refused(saved, make_classifier):
    path = saved[1] / TENSORS_FILE
    tensors = safetensors.torch.load_file(str(path))
    safetensors.torch.save_file({name: t.to(torch.int8) for name, t in tensors.items()}, str(path))
    resync_sha(saved[1])
    model = make_classifier()
    with pytest.raises(CheckpointError, match="non-floating type"):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None


@pytest.mark.parametrize(
    "change",
    [
        lambda m: m["adapter"].update(activation="relu"),
        lambda m: m["adapter"].update(init_scale=0.5),
        lambda m: m["adapter"].update(train_layernorm=False),
        lambda m: m["backbone"].update(name="/some/other/folder"),
        lambda m: m["extra"].update(accuracy=0.99),
    ],
    ids=["activation", "init_scale", "train_layernorm", "backbone name", "extra"],
)
def test_a_hand_edited_config_is_refused(saved, make_classifier, change):
    rewrite_config(saved[1], change, reseal=False)
    model = make_classifier()
    with pytest.raises(CheckpointError, match=f"{CONFIG_FILE} was changed after it was saved.*hand-edited"):
        load_adapter_set(model, saved[1])
    assert adapter_config(model) is None


def test_an_edited_activation_would_otherwise_load_the_wrong_nonlinearity(saved, make_classifier, batch):
    """Why the checksum matters: the same weights behind another f give other answers, with no error."""
    rewrite_config(saved[1], lambda m: m["adapter"].update(activation="relu"))  # resealed: the checksum is bypassed
    wrong = make_classifier(seed=0)
    load_adapter_set(wrong, saved[1])
    assert adapter_config(wrong).activation == "relu"
    assert not torch.allclose(logits(wrong, batch), logits(saved[0], batch))


def test_an_old_format_without_a_checksum_is_refused(saved, make_classifier):
    rewrite_config(saved[1], lambda m: (m.pop("checksum"), m.update(format_version=1)), reseal=False)
    with pytest.raises(CheckpointError, match="format_version 1.*no checksum; save the adapter set again"):
        load_adapter_set(make_classifier(), saved[1])


def test_the_manifest_stores_the_adapter_config(saved):
    manifest = json.loads((saved[1] / CONFIG_FILE).read_text())
    assert AdapterConfig.from_dict(manifest["adapter"]) == adapter_config(saved[0])
    assert manifest["checksum"] == checksum(manifest)


# ---------------------------------------------------------------------------------------------------
# a save killed at any instant
# ---------------------------------------------------------------------------------------------------


class Killed(BaseException):
    """The process dies here. A BaseException, so no ``except Exception`` clean-up runs, as after a real kill."""


#: Every call through which a save changes the disk.
DISK_OPERATIONS = ("mkdir", "open", "write", "fsync", "replace", "rename", "unlink", "rmdir")


def save_killed_at(instant: int, model, directory) -> bool:
    """Save as a process killed at its instant-th disk operation (from 1): that operation and every later
    one fail, and a killed write leaves half its bytes. Returns whether the kill came before the save ended."""
    real = {name: getattr(os, name) for name in DISK_OPERATIONS}
    count = 0

    def dying(name):
        def operation(*args, **kwargs):
            nonlocal count
            count += 1
            if count == instant and name == "write":
                real["write"](args[0], bytes(args[1])[: len(args[1]) // 2])
            if count >= instant:
                raise Killed(f"killed at os.{name}")
            return real[name](*args, **kwargs)

        return operation

    try:
        for name in DISK_OPERATIONS:
            setattr(os, name, dying(name))
        save_adapter_set(model, directory)
    except Killed:
        return True
    finally:
        for name, function in real.items():
            setattr(os, name, function)
    return False


def weights(model) -> dict:
    return {name: tensor.detach().clone() for name, tensor in saved_parameters(model).items()}


def loaded_as(directory, make_classifier, versions: dict) -> str:
    """Which version a fresh model loads from the folder: the key of ``versions`` whose weights it gets
    bit for bit, or "none" when the loader refuses the folder as holding no complete set."""
    fresh = make_classifier(seed=0)
    try:
        load_adapter_set(fresh, directory)
    except CheckpointError as error:
        assert "is missing" in str(error), error
        return "none"
    loaded = weights(fresh)
    matches = [
        name for name, expected in versions.items()
        if loaded.keys() == expected.keys() and all(torch.equal(loaded[key], expected[key]) for key in loaded)
    ]
    assert len(matches) == 1, "the folder loads as a mix of versions"
    return matches[0]


def kind(name: str) -> str:
    """What a file in an adapter-set folder is: one of the two files, or a hidden leftover of a save."""
    if name.endswith(".tmp"):
        return "temporary"
    return "pending" if name.startswith(".adapters-") else name


def kill_every_instant(start, model, workdir):
    """For each instant of one save from the folder ``start``: a copy of it with that save killed there."""
    instant = 1
    while True:
        folder = workdir / f"killed-at-{instant}"
        if start.exists():
            shutil.copytree(start, folder)
        if not save_killed_at(instant, model, folder):
            assert instant > 10, "the save made too few disk operations for this test to mean anything"
            return
        yield instant, folder
        instant += 1


def test_a_save_killed_at_any_instant_leaves_the_old_or_the_new_set(saved, make_classifier, tmp_path):
    old, directory = saved
    new, newest = trained(make_classifier(seed=0), seed=99), trained(make_classifier(seed=0), seed=5)
    versions = {"old": weights(old), "new": weights(new), "newest": weights(newest)}
    seen = {}
    for instant, folder in kill_every_instant(directory, new, tmp_path):
        state = loaded_as(folder, make_classifier, versions)
        assert state in ("old", "new"), f"killed at instant {instant}: {state}"
        leftovers = frozenset(kind(path.name) for path in folder.iterdir())
        if (state, leftovers) not in seen:
            seen[state, leftovers] = instant
            # The next save clears what a killed one left, and must itself survive a kill at any instant.
            for later, again in kill_every_instant(folder, newest, tmp_path / f"after-{instant}"):
                after = loaded_as(again, make_classifier, versions)
                assert after in (state, "newest"), f"killed at {instant}, then at {later}: {after}"
        save_adapter_set(newest, folder)
        assert sorted(p.name for p in folder.iterdir()) == [CONFIG_FILE, TENSORS_FILE], f"killed at {instant}"
        assert loaded_as(folder, make_classifier, versions) == "newest"
    assert {state for state, _ in seen} == {"old", "new"}
    # Killed saves leave a temporary file, new tensors the old manifest does not name, and new tensors the new
    # manifest does name but which were not yet renamed into place:
    assert {"temporary", "pending"} <= set().union(*(leftovers for _, leftovers in seen))
    assert any(state == "new" and "pending" in leftovers for state, leftovers in seen)


def test_a_first_save_killed_at_any_instant_leaves_nothing_or_the_new_set(make_classifier, tmp_path):
    new = trained(make_classifier(seed=0), seed=99)
    versions = {"new": weights(new)}
    seen = set()
    for instant, folder in kill_every_instant(tmp_path / "never-saved", new, tmp_path):
        seen.add(loaded_as(folder, make_classifier, versions) if folder.exists() else "none")
        if folder.exists():
            save_adapter_set(new, folder)
            assert sorted(p.name for p in folder.iterdir()) == [CONFIG_FILE, TENSORS_FILE]
    assert seen == {"none", "new"}


@pytest.mark.parametrize("extra, words", [
    (["sst2", 7], "'extra' is a JSON list, not an object"),
    ({"seed": "7"}, "extra.seed is '7', not an integer from 0 to 4294967295"),
    ({"seed": [7]}, "extra.seed is [7], not an integer"),
    ({"seed": None}, "extra.seed is None, not an integer"),
    ({"seed": 2**32}, "extra.seed is 4294967296, not an integer from 0 to 4294967295"),
    ({"seed": -1}, "extra.seed is -1, not an integer"),
    ({"seed": True}, "extra.seed is True, not an integer"),
    ({"task": ["sst2"]}, "extra.task is ['sst2'], not a task's name"),
])
def test_a_sealed_manifest_whose_extra_is_not_what_train_writes_is_named_by_file_and_field(saved, make_classifier,
                                                                                           extra, words):
    rewrite_config(saved[1], lambda manifest: manifest.update(extra=extra))
    with pytest.raises(CheckpointError) as refused:
        load_adapter_set(make_classifier(), saved[1])
    assert str(refused.value).startswith(f"{saved[1] / CONFIG_FILE} is malformed: {words}")


@pytest.mark.parametrize("value, dtype, words", [
    (float("nan"), None, "holds NaN or infinite values;"),
    (float("-inf"), None, "holds NaN or infinite values;"),
    (1e6, torch.float16, "holds 1e+06, beyond float16's range (±65504):"),  # said as what it is, not as NaN
])
def test_weights_that_are_not_finite_are_refused_at_save_and_the_set_before_is_kept(make_classifier, tmp_path, value,
                                                                                   dtype, words):
    model = trained(make_classifier())
    save_adapter_set(model, tmp_path / "set")
    before = {path.name: path.read_bytes() for path in (tmp_path / "set").iterdir()}
    name = sorted(saved_parameters(model))[-1]
    with torch.no_grad():
        saved_parameters(model)[name].view(-1)[0] = value
    with pytest.raises(CheckpointError) as refused:
        save_adapter_set(model, tmp_path / "set", dtype=dtype)
    assert str(refused.value).startswith(f"tensor {name} {words} nothing was saved to {tmp_path / 'set'}")
    assert {path.name: path.read_bytes() for path in (tmp_path / "set").iterdir()} == before
    with pytest.raises(CheckpointError, match="nothing was saved"):
        save_adapter_set(model, tmp_path / "new", dtype=dtype)
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(("change", "message"), [
    (lambda m: m["backbone"].update(num_labels=10**8), "backbone.num_labels must be at most 100,000"),
    (lambda m: m["adapter"].update(bottleneck=10**7), "adapter.bottleneck must be at most 65,536"),
    (lambda m: m["adapter"].update(bottleneck=0), "adapter.bottleneck must be"),
])
def test_sizes_read_from_a_resealed_config_are_bounded_before_anything_is_built(saved, change, message):
    """A size out of bounds would build a classifier of 10^8 rows (minutes toward out-of-memory) or a bottleneck
    of 10^7 before anything said why; the CLI and `import` hold sizes to the same bounds."""
    from adapterlab.checkpoints import read_adapter_config

    rewrite_config(saved[1], change)
    with pytest.raises(CheckpointError, match=message):
        read_adapter_config(saved[1])


def _with_values(model, *values):
    """The model with the first saved values set to ``values`` (what a run that trained far would hold)."""
    name = sorted(saved_parameters(model))[-1]
    with torch.no_grad():
        saved_parameters(model)[name].view(-1)[:len(values)] = torch.tensor(values)
    return model


def test_train_keeps_a_run_whose_weights_float16_cannot_hold_and_says_why(make_classifier, tmp_path, capsys):
    from adapterlab.cli import _save_in_dtype

    model = _with_values(trained(make_classifier()), 7.1e4)
    _save_in_dtype(lambda dtype: save_adapter_set(model, tmp_path / "set", dtype=dtype), model, torch.float16)
    said = capsys.readouterr().err
    assert "holds 7.1e+04, beyond float16's range (±65504)" in said and "written in the model's dtype" in said
    saved_tensors = safetensors.torch.load_file(str(tmp_path / "set" / TENSORS_FILE))
    assert {t.dtype for t in saved_tensors.values()} == {torch.float32}
    assert max(t.abs().max().item() for t in saved_tensors.values()) == pytest.approx(7.1e4)


def test_values_float16_writes_as_zero_are_counted(make_classifier, tmp_path, capsys):
    from adapterlab.cli import _save_in_dtype

    model = _with_values(trained(make_classifier()), 1e-9, -2e-9, 1e-8)  # float16 holds nothing below 2.98e-08
    lost, total = flushed_to_zero(model, torch.float16)
    expected = sum(int(((p != 0) & (p.half() == 0)).sum()) for p in saved_parameters(model).values())
    assert lost == expected >= 3 and total == sum(p.numel() for p in saved_parameters(model).values())
    _save_in_dtype(lambda dtype: save_adapter_set(model, tmp_path / "set", dtype=dtype), model, torch.float16)
    assert f"{lost:,} of {total:,} saved values are too small for float16 (below 5.96e-08)" in capsys.readouterr().err
    _save_in_dtype(lambda dtype: save_adapter_set(model, tmp_path / "fp32", dtype=dtype), model, None)
    assert capsys.readouterr().err == ""  # the model's own dtype loses nothing
