"""Take an adapter set to AdapterHub's ``adapters`` or Hugging Face ``peft``, and bring one back.

``adapterlab export RUN_FOLDER --to adapterhub|peft --out DIR`` writes a folder that the library loads
with its own public API, the classifier head included, safetensors only:

* **AdapterHub** (houlsby, pfeiffer, parallel; :mod:`adapterlab.interop.adapterhub`):
  ``adapters.init(model); model.load_adapter(DIR, use_safetensors=True, set_active=True)`` on a
  ``BertForSequenceClassification`` of the same backbone. Houlsby is DoubleSeqBnConfig, Pfeiffer SeqBnConfig,
  parallel ParBnConfig, each with adapterlab's bottleneck, nonlinearity and layers.
* **PEFT** (lora; :mod:`adapterlab.interop.peft`): ``PeftModel.from_pretrained(base, DIR)``.

Its README.md holds the Python that loads it as written (the base model, the folder, the number of labels and
their names: the task's, in the task's order).

``adapterlab import DIR --out RUN_FOLDER`` reads such a folder (written here or by the library itself) back
into an adapter set that ``adapterlab evaluate`` loads. A folder whose computation no adapterlab method
reproduces exactly is refused with a message that says why; nothing is ever loaded approximately. A classifier
whose rows the folder names with the task's labels in another order comes in with its rows in the task's order;
one named with other labels is refused, naming both.

Both libraries call their manifest ``adapter_config.json``, and so does adapterlab: the three schemas differ
(adapterlab's says ``"format": "adapterlab-adapter-set"``, PEFT's has a ``peft_type``, AdapterHub's a
``config`` and a ``version`` starting with ``adapters.``), :func:`folder_kind` tells them apart, and every
reader here names the kind it found when it is not the one it wants. An exported folder also holds
``adapterlab_export.json`` (which set it came from: task, seed, method, label names; neither library reads it).
"""

from __future__ import annotations

from pathlib import Path

from safetensors import SafetensorError

from ..methods.checkpoints import describe_kind, folder_kind
from .common import (EXPORT_FILE, HUB_NAMES, InteropError, TARGETS, backbone_for, check_bert, check_library_folder,
                     check_plain_files, export_record, label_order, read_export_record, read_set, reorder_classifier,
                     stated_labels, write_errors_as_os_errors, write_json)

README = "README.md"
#: Each target's library, by the name people know it by.
LIBRARIES = {"adapterhub": "AdapterHub", "peft": "PEFT"}


def export_set(run_folder, target: str, out, *, name: str | None = None, backbone_tensors: bool = False,
               overwrite: bool = False) -> Path:
    """Write the run folder's adapter set as ``target``'s folder at ``out`` (whole or not at all); return ``out``.

    ``backbone_tensors`` (AdapterHub only) writes trained backbone LayerNorms, which an AdapterHub adapter has no
    place for, beside it in ``trained_backbone.safetensors`` (see :mod:`adapterlab.interop.adapterhub`); without it
    such a set is refused. A trained pooler goes as AdapterHub's classification head either way.
    """
    from ..runs.folder import recover_read, write_new, writing_run_folder

    if target not in TARGETS:
        raise InteropError(f"--to must be one of {', '.join(TARGETS)}; got {target!r}")
    recover_read(run_folder, "export")
    manifest, tensors = read_set(run_folder)
    check_bert(manifest, tensors)
    if target == "adapterhub":
        from .adapterhub import write_adapterhub as write
        options = {"name": name, "backbone_tensors": backbone_tensors}
    else:
        from .peft import write_peft as write
        if backbone_tensors:
            raise InteropError("--backbone-tensors is for --to adapterhub: a PEFT folder holds a trained pooler "
                               "itself (modules_to_save), and LoRA sets train no LayerNorms")
        options = {}
    with writing_run_folder(out, overwrite=overwrite, command="export", reads=run_folder) as staging:
        with write_errors_as_os_errors(out):
            write(manifest, tensors, staging, **options)
        write_json(staging / EXPORT_FILE, export_record(manifest, target))
        write_new(staging / README, "\n".join([f"# Load this adapter in {LIBRARIES[target]}", "", "```python",
                                                *load_code(staging, out), "```", ""]))
    return Path(out)


def load_code(folder, where=None) -> list[str]:
    """The Python that loads an exported folder in its library as written, every name it uses defined (its README.md
    holds it, `adapterlab export` prints it); ``where``: where the folder will be (default: where it is)."""
    folder = Path(folder)
    record = read_export_record(folder)
    if record["target"] == "adapterhub":
        from .adapterhub import load_lines
    else:
        from .peft import load_lines
    return load_lines(folder, record, folder if where is None else where)


def import_set(folder, out, *, backbone: str | None = None, task: str | None = None,
               overwrite: bool = False) -> tuple[Path, dict]:
    """Read an AdapterHub or PEFT folder into an adapterlab adapter set at ``out``; return ``out`` and a summary.

    The backbone is the one the folder records (``backbone`` overrides it, and is needed for a random one);
    the task the one ``adapterlab_export.json`` or the adapter's name says (``task`` overrides it).
    """
    from ..training.backbones import load_backbone
    from ..methods.checkpoints import save_adapter_set
    from ..training.data import OWN_PREFIX, TASKS, get_task
    from ..runs.folder import recover_read, writing_run_folder

    folder = Path(folder)
    recover_read(folder, "import")
    if not folder.is_dir():
        raise InteropError(f"{folder}: no such folder; pass a folder written by model.save_adapter / "
                           "model.save_pretrained or by `adapterlab export`")
    from .adapterhub import setup_adapter

    folder = setup_adapter(folder)
    check_plain_files(folder)
    kind = folder_kind(folder)
    if kind == "adapterlab":
        raise InteropError(f"{folder} is already an adapterlab adapter set: `adapterlab evaluate --checkpoint "
                           f"{folder}` reads it as it is")
    if kind is None:
        inside = sorted(child.name for child in folder.iterdir() if child.is_dir() and folder_kind(child) is not None)
        if inside:  # PEFT saves an adapter not named "default" in a folder of its name
            raise InteropError(f"{folder} holds no adapter_config.json, but its folder{'s' if len(inside) > 1 else ''} "
                               f"{', '.join(inside)} {'do' if len(inside) > 1 else 'does'} (an adapter saved under its "
                               f"own name): import {folder / inside[0]}")
        raise InteropError(f"{folder} holds {describe_kind(None)}: import reads a PEFT folder (adapter_config.json "
                           "with a peft_type) or an AdapterHub one (adapter_config.json with a config and an "
                           "adapters version)")
    check_library_folder(folder, kind)
    if kind == "peft":
        from .peft import read_peft as read
    else:
        from .adapterhub import read_adapterhub as read
    try:
        plan = read(folder)  # checks everything it can without the backbone
    except (KeyError, TypeError, AttributeError, IndexError, OverflowError, ZeroDivisionError, SafetensorError) as error:
        # what the checks above did not foresee in a damaged folder still ends in one line
        raise InteropError(f"{folder} is not a folder the library writes ({type(error).__name__}: "
                           f"{str(error)[:100]}); save it again with the library") from None
    record = read_export_record(folder)
    # a folder adapterlab exported names the adapterlab backbone it was trained on (a random one too)
    name = backbone or backbone_for(plan["base_model"]) or (record.get("backbone") or {}).get("name")
    if name is None:
        raise InteropError(f"{folder} records the base model {plan['base_model']!r}, which is none of adapterlab's "
                           f"backbones ({', '.join(HUB_NAMES.values())}): pass --backbone NAME")
    task_name = task or record.get("task") or (plan.get("name") if plan.get("name") in TASKS else None)
    if task_name is None:
        raise InteropError(f"{folder} does not say which task its classifier was trained on: pass --task "
                           f"({', '.join(TASKS)})")
    # the library's own names for the rows, else those an export recorded (PEFT's folder has no place for them)
    stated = plan["labels"] or stated_labels(folder / EXPORT_FILE, "id2label", record.get("id2label"))
    recorded, order = {}, None
    if str(task_name).startswith(OWN_PREFIX) and not task:
        # a task of the user's own files, which no process knows without its files: the run keeps its name and the
        # rows as the folder names them (export writes them in the task's order); evaluate scores it given the files
        names = list(stated[0]) if stated else [f"LABEL_{row}" for row in range(plan["num_labels"])]
        recorded = {"label_names": names}
        plan["notes"].append(
            f"{task_name} is a task of your own files (classes {', '.join(names)}): evaluate it with the same "
            "--train-file, --dev-file, --text-column and --label-column it was trained with")
    else:
        spec = get_task(task_name)
        if plan["num_labels"] != spec.num_labels:
            raise InteropError(f"{folder}: its classifier has {plan['num_labels']} labels, the task {spec.name} has "
                               f"{spec.num_labels}: pass the --task it was trained on")
        order = label_order(stated, spec, folder)
        if order:
            plan["notes"].append(f"its classifier's rows scored {', '.join(stated[0])}: they are put in {spec.name}'s "
                                 f"order, {', '.join(spec.label_names)}")
        task_name = spec.name
    seed = record.get("seed") or 0
    with writing_run_folder(out, overwrite=overwrite, command="import", reads=folder) as staging:
        model, _, info = load_backbone(name, num_labels=plan["num_labels"], fallback=False, seed=seed)
        plan["apply"](model)
        if order:
            reorder_classifier(model, order)
        save_adapter_set(model, staging, backbone=info,
                         extra={"task": task_name, "seed": seed, **recorded,
                                "imported_from": {"kind": kind, "folder": str(folder), "base_model": plan["base_model"]}})
    summary = {"kind": kind, "method": plan["method"], "backbone": info.loaded, "task": task_name}
    return Path(out), {**summary, **({"notes": plan["notes"]} if plan.get("notes") else {})}
