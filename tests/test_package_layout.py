"""The package's shape: subpackages in the labs' order with no import upward and no import circle, the
old module names a saved notebook imports, and the functions a lab prints kept in step with its output."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import re
from pathlib import Path

import pytest

import adapterlab

PACKAGE = Path(adapterlab.__file__).parent
LABS = PACKAGE.parent / "labs"
#: Each layer may import only the layers before it (and itself).
LAYERS = ["settings", "validation", "paths", "model", "methods", "training", "runs", "interop", "teaching", "legacy",
          "doctor", "cli", "__main__", "__init__"]


def layer_of(module: str) -> str:
    return module.split(".")[0]


def package_imports() -> dict[str, set[str]]:
    """module (dotted, under adapterlab) -> the adapterlab modules it imports, resolved."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        name = ".".join(parts)
        package = parts[:-1] if parts[-1] != "__init__" else parts[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                base = package[:len(package) - node.level + 1] if node.level > 1 else package
                if node.module:
                    targets.add(".".join([*base, *node.module.split(".")]))
                else:
                    targets.update(".".join([*base, alias.name]) for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("adapterlab."):
                targets.add(node.module.removeprefix("adapterlab."))
        found[name] = {t for t in targets if t}
    return found


def test_no_module_imports_a_later_layer():
    order = {name: i for i, name in enumerate(LAYERS)}
    wrong = []
    for module, targets in package_imports().items():
        for target in targets:
            if target and layer_of(target) in order and order[layer_of(target)] > order[layer_of(module)]:
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_no_import_circle_between_modules():
    graph = package_imports()
    known = set(graph)
    edges = {m: {t for t in ts if t in known and t != m} for m, ts in graph.items()}
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in edges[node]:
            if state.get(nxt) == "open":
                raise AssertionError(" -> ".join([*path, node, nxt]))
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = "done"

    for module in edges:
        if module not in state and not module.endswith("__init__") and layer_of(module) != "legacy":
            visit(module, [])


def test_the_flat_folder_holds_only_the_layers_below_and_above_the_subpackages():
    flat = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert flat == ["__init__", "__main__", "cli", "doctor", "paths", "settings", "validation"]


def lab_imports() -> list[tuple[str, str]]:
    """(module, name) for every `from adapterlab... import ...` and `from adapterlab import x` in the labs."""
    pairs = []
    for notebook in sorted(LABS.glob("*.ipynb")):
        for cell in json.loads(notebook.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            source = re.sub(r"\(\s*([^)]*)\)", lambda m: m.group(1).replace("\n", " "), "".join(cell["source"]))
            for line in source.splitlines():
                match = re.match(r"\s*from (adapterlab[\w.]*) import (.+)", line)
                if match:  # names without their comment or "as" alias
                    names = match.group(2).split("#")[0].split(",")
                    pairs += [(match.group(1), n.split(" as ")[0].strip()) for n in names if n.strip()]
    return pairs


def test_every_name_a_lab_imports_resolves():
    assert len(lab_imports()) > 50
    for module, name in lab_imports():
        package = importlib.import_module(module)
        found = hasattr(package, name) or importlib.util.find_spec(f"{module}.{name}") is not None  # a submodule
        assert found, f"from {module} import {name}"


@pytest.mark.parametrize("old", sorted(adapterlab.MOVED))
def test_old_module_names_still_import(old):
    """A notebook saved before the subpackages imports `adapterlab.OLD` and finds what it held."""
    module = importlib.import_module(f"adapterlab.{old}")
    target = importlib.import_module(f"adapterlab.{adapterlab.MOVED[old]}")
    assert module is target
    assert getattr(adapterlab, old) is target


def test_the_names_old_notebooks_took_from_split_modules_are_there():
    from adapterlab.placement import METHODS, apply_method, parameter_group, set_trainable, trainable_summary  # noqa
    from adapterlab.training import DEFAULT_LEARNING_RATES, TrainConfig, evaluate, run_experiment, train  # noqa
    from adapterlab.lora import LoRALinear, fold_adapters  # noqa
    from adapterlab.counting import bert_counts, method_counts  # noqa
    assert "ia3" in METHODS and DEFAULT_LEARNING_RATES["lora"] == 5e-4


def test_a_printed_function_in_a_lab_matches_the_package_source():
    """Lab 6 prints configure_optimizer and train_step: its committed output is today's source of both."""
    import inspect

    from adapterlab.training import loop

    notebook = json.loads((LABS / "06_train_sst2.ipynb").read_text())
    printed = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"
               and "getsource(loop.configure_optimizer)" in "".join(cell["source"])]
    assert len(printed) == 1
    text = "".join("".join(o.get("text", "")) for o in printed[0]["outputs"])
    for function in (loop.configure_optimizer, loop.train_step):
        assert inspect.getsource(function) in text, function.__name__


TEACHING_PARTS = ("exercises", "notebook", "instructor")  # whom each serves: a student's checks, the notebook, the lecturer


def test_teaching_is_split_by_whom_each_part_serves_and_no_part_imports_another():
    teaching = PACKAGE / "teaching"
    assert sorted(p.name for p in teaching.iterdir() if p.suffix == ".py") == ["__init__.py"]
    assert sorted(p.name for p in teaching.iterdir() if p.is_dir() and p.name != "__pycache__") == sorted(TEACHING_PARTS)
    crossing = [f"{module} imports {target}" for module, targets in package_imports().items()
                for target in targets
                if module.startswith("teaching.") and target.startswith("teaching.")
                and module.split(".")[1] != target.split(".")[1]]
    assert not crossing, crossing


@pytest.mark.parametrize("name", ["checks", "checks_training", "checks_anatomy", "plots", "widgets", "panel", "probes", "profiles",
                                  "anatomy", "student", "slides", "slide_layout", "slides_pdf", "labfiles"])
def test_a_lab_s_short_teaching_import_is_the_module_in_its_part(name):
    """`from adapterlab.teaching import checks` (the labs' line) gives the module its part holds."""
    [part] = [part for part in TEACHING_PARTS if (PACKAGE / "teaching" / part / f"{name}.py").exists()]
    namespace = {}
    exec(f"from adapterlab.teaching import {name}", namespace)
    assert namespace[name] is importlib.import_module(f"adapterlab.teaching.{part}.{name}")
