"""`adapterlab import` of damaged and hostile folders: every one ends in a result or in one line that names the
file and the field, never a traceback or a hang, builds nothing a size read from a file would blow up, and
writes nothing outside --out.

The folders start from real exports (a PEFT LoRA and an AdapterHub Houlsby adapter of the tiny random backbone),
then are damaged by hand (the known cases) and at random (the fuzz: truncated and bit-flipped safetensors,
random JSON within and outside the schema, links, FIFOs, missing files).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
from pathlib import Path

import pytest
import safetensors.torch
import torch

from adapterlab import cli
from adapterlab.backbones import TINY, load_backbone
from adapterlab.checkpoints import save_adapter_set
from adapterlab.cli import FAILED, OK, USAGE
from adapterlab.interop.convert import export_set
from adapterlab.placement import apply_method

SETS = {"peft": ("lora", {"lora_rank": 2}), "adapterhub": ("houlsby", {"bottleneck": 4, "train_layernorm": False})}
WEIGHTS = {"peft": "adapter_model.safetensors", "adapterhub": "adapter.safetensors"}
CONFIG = "adapter_config.json"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """{"peft": folder, "adapterhub": folder}: real exports of small sets whose weights are not all zero."""
    root = tmp_path_factory.mktemp("exports")
    folders = {}
    for target, (method, settings) in SETS.items():
        model, _, info = load_backbone(TINY, num_labels=2, seed=0)
        apply_method(model, method, **settings)
        with torch.no_grad():
            for parameter in model.parameters():
                if parameter.requires_grad:
                    parameter.add_(0.1)
        run = save_adapter_set(model, root / f"run-{target}", backbone=info, extra={"task": "sst2", "seed": 0})
        folders[target] = export_set(run, target, root / target)
    return folders


@pytest.fixture
def no_hang():
    """A read that blocks (a FIFO) fails the test instead of hanging it."""
    def stuck(*_):
        raise AssertionError("import blocked on a read")

    previous = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def copy_of(exported, target: str, root: Path) -> Path:
    folder = root / f"in-{target}"
    shutil.copytree(exported[target], folder)
    return folder


def edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def edit_tensors(path: Path, change) -> None:
    tensors = safetensors.torch.load_file(str(path))
    change(tensors)
    safetensors.torch.save_file(tensors, str(path))


def first(tensors: dict, word: str) -> str:
    return next(name for name in sorted(tensors) if word in name)


def import_result(capsys, folder: Path, out: Path) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(["import", str(folder), "--out", str(out)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("adapterlab import: "), err
    return lines[0]


def refused_line(code: int, err: str) -> str:
    assert code == USAGE, (code, err)
    return one_line(err)


def set_field(target: str, field: str, value):
    """A change to adapter_config.json: ``field`` of PEFT's config, of AdapterHub's inner config."""
    def change(data):
        (data if target == "peft" else data["config"])[field] = value
    return change


def no_building(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a model was built from a folder that should have been refused")

    monkeypatch.setattr("adapterlab.training.backbones.load_backbone", refuse)


# ------------------------------------------------------------------------ the known cases, one line each


CASES = {  # name: (target, damage, words the line holds)
    "r is a string": ("peft", lambda f: edit_json(f / CONFIG, set_field("peft", "r", "2")), ["adapter_config.json", "r must be an integer"]),
    "r is 10^9": ("peft", lambda f: edit_json(f / CONFIG, set_field("peft", "r", 10**9)), ["adapter_config.json", "r must be at most"]),
    "r is missing": ("peft", lambda f: edit_json(f / CONFIG, lambda d: d.pop("r")), ["adapter_config.json", "r is missing"]),
    "lora_alpha is a list": ("peft", lambda f: edit_json(f / CONFIG, set_field("peft", "lora_alpha", [8])), ["lora_alpha must be"]),
    "target_modules is a number": ("peft", lambda f: edit_json(f / CONFIG, set_field("peft", "target_modules", 3)), ["target_modules must be"]),
    "reduction_factor is 0": ("adapterhub", lambda f: edit_json(f / CONFIG, set_field("adapterhub", "reduction_factor", 0)),
                              ["adapter_config.json", "config.reduction_factor must be"]),
    "reduction_factor makes a bottleneck of 10^9": (
        "adapterhub", lambda f: edit_json(f / CONFIG, lambda d: d.update(hidden_size=10**12)), ["bottleneck", "at most"]),
    "hidden_size is missing": ("adapterhub", lambda f: edit_json(f / CONFIG, lambda d: d.pop("hidden_size")), ["hidden_size is missing"]),
    "leave_out is text": ("adapterhub", lambda f: edit_json(f / CONFIG, set_field("adapterhub", "leave_out", "0")),
                          ["config.leave_out must be a list"]),
    "the export record's seed is a list": (
        "peft", lambda f: edit_json(f / "adapterlab_export.json", lambda d: d.update(seed=[1])), ["adapterlab_export.json", "seed"]),
    "a truncated safetensors": ("peft", lambda f: (f / WEIGHTS["peft"]).write_bytes((f / WEIGHTS["peft"]).read_bytes()[:200]),
                                ["adapter_model.safetensors", "not a whole safetensors file"]),
    "NaN weights": ("adapterhub", lambda f: edit_tensors(f / WEIGHTS["adapterhub"], lambda t: t[first(t, "adapter_up")].fill_(float("nan"))),
                    ["adapter.safetensors", "adapter_up", "NaN"]),
    "infinite head": ("adapterhub", lambda f: edit_tensors(f / "model_head.safetensors", lambda t: t["classifier.bias"].fill_(float("inf"))),
                      ["model_head.safetensors", "classifier.bias", "NaN or infinite"]),
    "int8 weights": ("peft", lambda f: edit_tensors(f / WEIGHTS["peft"], lambda t: t.update({first(t, "lora_A"): t[first(t, "lora_A")].to(torch.int8)})),
                     ["lora_A", "int8"]),
    "bool weights": ("adapterhub", lambda f: edit_tensors(f / WEIGHTS["adapterhub"], lambda t: t.update({first(t, "down"): t[first(t, "down")] > 0})),
                     ["adapter_down", "bool"]),
    "a LoRA matrix of another rank than the config's": (
        "peft", lambda f: edit_tensors(f / WEIGHTS["peft"], lambda t: t.update({first(t, "lora_A"): torch.ones(3, 32)})), ["lora_A", "r = 2"]),
    "a classifier that is not a matrix": (
        "adapterhub", lambda f: edit_tensors(f / "model_head.safetensors", lambda t: t.update({"classifier.weight": torch.ones(3)})),
        ["classifier.weight", "shape [3]"]),
    "a FIFO as the config": ("peft", lambda f: ((f / CONFIG).unlink(), os.mkfifo(f / CONFIG)), ["adapter_config.json", "not a plain file"]),
    "a FIFO as the weights": ("adapterhub", lambda f: ((f / WEIGHTS["adapterhub"]).unlink(), os.mkfifo(f / WEIGHTS["adapterhub"])),
                              ["adapter.safetensors", "not a plain file"]),
    "a link to a device as the weights": (
        "peft", lambda f: ((f / WEIGHTS["peft"]).unlink(), (f / WEIGHTS["peft"]).symlink_to("/dev/zero")), ["not a plain file"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_damaged_folder_is_refused_in_one_line_naming_the_file_and_field(case, exported, tmp_path, capsys,
                                                                          monkeypatch, no_hang):
    target, damage, words = CASES[case]
    folder = copy_of(exported, target, tmp_path)
    damage(folder)
    no_building(monkeypatch)
    code, _, err = import_result(capsys, folder, tmp_path / "out")
    line = refused_line(code, err)
    assert all(word in line for word in words), line
    assert sorted(p.name for p in tmp_path.iterdir()) == [folder.name]  # nothing written, nothing left


def test_an_undamaged_export_imports(exported, tmp_path, capsys):
    for target in SETS:
        code, out, err = import_result(capsys, copy_of(exported, target, tmp_path), tmp_path / f"out-{target}")
        assert code == OK and "imported" in out, err


# ------------------------------------------------------------------------ the fuzz


def random_json(rng: random.Random, depth: int = 0):
    """Any JSON value: the values a config holds and the ones it never should."""
    kinds = ["int", "big", "float", "text", "bool", "null"] + (["list", "object"] if depth < 3 else [])
    kind = rng.choice(kinds)
    if kind == "int":
        return rng.choice([0, 1, 2, -1, 4, 16, 32])
    if kind == "big":
        return rng.choice([10**9, 10**18, 2**64, -(10**12)])
    if kind == "float":
        return rng.choice([0.0, 0.5, 1e-300, 1e300, -2.5, 16.0])
    if kind == "text":
        return rng.choice(["", "2", "relu", "LORA", "SEQ_CLS", "bert", "x" * 300, "\u00e9"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["r", "config", "a", "leave_out"]): random_json(rng, depth + 1) for _ in range(rng.randint(0, 3))}


def damage_at_random(rng: random.Random, folder: Path, target: str, outside: Path) -> str:
    """One random damage to ``folder``; returns what it was. Links point at ``outside``, which must not change."""
    files = sorted(p.name for p in folder.iterdir() if p.is_file() and not p.is_symlink())  # not a FIFO made before
    if not files:
        return "nothing left to damage"
    name = rng.choice(files)
    path = folder / name
    kind = rng.choice(["truncate", "flip", "flip", "field", "field", "json", "link", "fifo", "remove"])
    if kind == "field" and not _has_inner_config(folder):
        kind = "json"
    if kind == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[:rng.randrange(len(data))])
    elif kind == "flip":
        data = bytearray(path.read_bytes())
        for _ in range(rng.randint(1, 8)):
            spot = rng.randrange(min(len(data), 400) if rng.random() < 0.7 else len(data))  # the header most often
            data[spot] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
    elif kind == "field":
        config = json.loads((folder / CONFIG).read_text())
        inner = config if "config" not in config or rng.random() < 0.3 else config["config"]
        field = rng.choice(sorted(inner) + ["r", "hidden_size", "reduction_factor"])
        inner[field] = random_json(rng)
        name = CONFIG
        (folder / CONFIG).write_text(json.dumps(config))
    elif kind == "json":
        path.write_text(json.dumps(random_json(rng)))
    elif kind == "link":
        path.unlink()
        path.symlink_to(rng.choice([outside, outside.parent, folder / "nowhere", path, Path("/dev/zero")]))
    elif kind == "fifo":
        path.unlink()
        os.mkfifo(path)
    else:
        path.unlink()
    return f"{kind} {name}"


def _has_inner_config(folder: Path) -> bool:
    """Whether adapter_config.json is still a plain file holding an object (with an object "config", if any)."""
    path = folder / CONFIG
    if not path.is_file() or path.is_symlink():
        return False
    try:
        config = json.loads(path.read_text())
    except ValueError:
        return False
    return isinstance(config, dict) and isinstance(config.get("config", {}), dict)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind and content, links not followed."""
    found = {}
    for path in sorted(root.rglob("*")):
        info = path.lstat()
        content = path.read_bytes() if path.is_file() and not path.is_symlink() else None
        found[str(path.relative_to(root))] = (info.st_mode, content)
    return found


FUZZ_CASES = 240


def test_import_of_damaged_and_hostile_folders_ends_in_a_result_or_one_line(exported, tmp_path, capsys, no_hang):
    rng = random.Random(38)
    outside = tmp_path / "outside.txt"
    outside.write_text("not an adapter")
    outcomes = {"imported": 0, "refused": 0}
    for number in range(FUZZ_CASES):
        case = tmp_path / f"case{number}"
        case.mkdir()
        target = rng.choice(sorted(SETS))
        folder = copy_of(exported, target, case)
        what = [damage_at_random(rng, folder, target, outside) for _ in range(rng.choice([1, 1, 2]))]
        before = tree(tmp_path)
        out = case / "out"
        code, stdout, err = import_result(capsys, folder, out)
        assert code in (OK, USAGE, FAILED), (what, code, err)  # the exit codes `adapterlab --help` lists
        if code == OK:
            assert "imported" in stdout and err == "", (what, err)
            outcomes["imported"] += 1
        else:
            one_line(err)
            assert not out.exists(), what
            outcomes["refused"] += 1
        after = tree(tmp_path)
        written = {path for path in set(before) | set(after) if before.get(path) != after.get(path)}
        assert all(path.startswith(f"case{number}/out") for path in written), (what, written)
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(case)
    assert outside.read_text() == "not an adapter"
    assert outcomes["refused"] > FUZZ_CASES // 2 and outcomes["imported"] > 0, outcomes  # both paths were taken
