"""adapterlab: a teaching lab on bottleneck adapters (Houlsby et al. 2019).

The package follows the labs' flow, one layer per subpackage; a layer imports only the ones before it:

* :mod:`adapterlab.model` — the adapter, the BERT surgery, LoRA, folding, counting, latency, checkpoints;
* :mod:`adapterlab.methods` — the registry: every training method declared once;
* :mod:`adapterlab.training` — backbones, data, precision, the training loop, one experiment;
* :mod:`adapterlab.runs` — the run store, run folders, sweeps, ablations, the trade-off and the PEFT map;
* :mod:`adapterlab.teaching` — exercise checks; what a notebook shows (plots, widgets, panel); instructor tools;
* :mod:`adapterlab.cli` — the command line on top.

Below them all: :mod:`adapterlab.settings` (a setting declared once), :mod:`adapterlab.validation` (argument
checks) and :mod:`adapterlab.paths` (where the project's folders are).

Modules that lived at the top of the package before it had subpackages (``adapterlab.placement``,
``adapterlab.training`` for the loop, ...) still import under their old names, as the same module objects,
so a notebook a student saved last term keeps running (:data:`MOVED`).
"""

import importlib
import importlib.abc
import importlib.util
import sys

#: Old module name -> where it lives now. ``adapterlab.training`` is a subpackage now; the names a lab
#: imported from the old ``adapterlab.training`` module are re-exported by the subpackage.
MOVED = {
    "adapter": "model.adapter", "placement": "legacy.placement", "lora": "legacy.lora", "lora_model": "model.lora",
    "counting": "legacy.counting", "latency": "model.latency", "checkpoints": "methods.checkpoints",
    "hub": "training.hub", "backbones": "training.backbones", "data": "training.data",
    "precision": "training.precision", "evaluation": "training.evaluation",
    "runstore": "runs.store", "run_folder": "runs.folder", "sweep": "runs.sweep", "ablation": "runs.ablation",
    "ablation_runs": "runs.ablation_runs", "ablation_report": "runs.ablation_report", "tradeoff": "legacy.tradeoff",
    "peft_map": "runs.peft_map", "experiments": "runs.reference",
    **{name: f"teaching.exercises.{name}" for name in ("checks", "checks_training")},
    **{name: f"teaching.notebook.{name}" for name in ("plots", "widgets", "panel", "probes", "profiles")},
    **{name: f"teaching.instructor.{name}" for name in ("student", "slides", "slide_layout", "slides_pdf", "labfiles")},
    # adapterlab.teaching was one folder before it was split by whom each part serves
    **{f"teaching.{name}": f"teaching.{part}.{name}" for part, names in (
        ("exercises", ("checks", "checks_training", "checks_anatomy")),
        ("notebook", ("plots", "widgets", "panel", "probes", "profiles", "anatomy")),
        ("instructor", ("student", "slides", "slide_layout", "slides_pdf", "labfiles"))) for name in names},
}


class _OldNames(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import ``adapterlab.OLD`` as the module that now lives at ``adapterlab.NEW`` (the same object)."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.partition(".")
        if package == __name__ and name in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = importlib.import_module(f"{__name__}.{MOVED[spec.name.partition('.')[2]]}")
        spec.loader_state = module.__spec__  # the import system is about to set the old name's spec on it
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


sys.meta_path.append(_OldNames())


#: The names the package itself exports -> the module that defines them. They are imported on first use, so
#: that importing the package does not import torch: `python -m adapterlab` reaches the command line (which
#: reports a Ctrl-C while torch loads in one line) before anything heavy loads.
EXPORTS = {
    **dict.fromkeys(("ACTIVATIONS", "INIT_SCHEMES", "BottleneckAdapter"), "model.adapter"),
    **dict.fromkeys(("bert_counts", "compare_counts", "count_model"), "model.counting"),
    **dict.fromkeys(("best_linear_fit", "fold_adapters", "fold_linear_adapter", "linear_adapter_matrix"), "model.fold"),
    "LoRALinear": "model.lora",
    **dict.fromkeys(("PLACEMENTS", "PlacementError", "add_adapters", "adapter_config", "enabled_layers",
                     "remove_adapters", "set_adapters_enabled"), "model.placement"),
    "trainable_summary": "model.trainable",
    "apply_method": "methods",
    "set_trainable": "methods.registry",
}


def __getattr__(name):  # `from adapterlab import placement` and `adapterlab.placement`; the exports, lazily
    if name in MOVED:
        return importlib.import_module(f"{__name__}.{name}")
    if name == "METHODS":
        value = importlib.import_module(f"{__name__}.methods").names()
    elif name in EXPORTS:
        value = getattr(importlib.import_module(f"{__name__}.{EXPORTS[name]}"), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *EXPORTS, "METHODS"})


__version__ = "0.1.0"

__all__ = [*EXPORTS, "METHODS"]
