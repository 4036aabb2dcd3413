"""The trained adapter sets lab 11 opens: Houlsby r = 64 on SST-2 and on CoLA, seeds 0, 1 and 2.

Lab 11 asks what training did to the adapters; it should not spend its minutes training them first, and every
student should open the same adapters, so that the lab's checked lines hold on every machine. The sets are made
by the package's own ``train`` command, at the fair comparison's budget and at the rate it selected for
Houlsby r = 64 on both tasks (lab 10), on the offline stand-in, and kept in the repository in float16
(``data/lab11``, about 1.5 MB a set). :func:`open_set` loads one into a fresh copy of its backbone, or names the
command that makes it when it is not there; :func:`anatomy_of` gives the lab's measurements of one.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, fields
from pathlib import Path

from torch import nn

from ...methods.checkpoints import TENSORS_FILE
from ...paths import DATA_DIR, PROJECT_ROOT
from ...runs.tuning import PROTOCOLS
from .set_anatomy import SetAnatomy, adapters_at_init, as_record, from_record, measure

LAB11_DIR = DATA_DIR / "lab11"
TASKS = ("sst2", "cola")
SEEDS = (0, 1, 2)
BACKBONE = "all-MiniLM-L6-v2"
BOTTLENECK = 64
#: The rate the fair comparison selected for Houlsby r = 64 on SST-2 and on CoLA (``tune --report``).
LEARNING_RATE = 1e-3


def set_folder(task: str, seed: int, folder=LAB11_DIR) -> Path:
    return Path(folder) / f"{task}-seed{seed}"


def train_arguments(task: str, seed: int, folder=LAB11_DIR) -> list[str]:
    """The ``python -m adapterlab train`` arguments that make the set of ``task`` and ``seed``: the fair
    comparison's protocol for the task (its validation rows, training rows, epochs and evaluations)."""
    if task not in PROTOCOLS:
        raise ValueError(f"lab 11 has sets for {' and '.join(TASKS)}; got task {task!r}")
    protocol = PROTOCOLS[task]
    rows = [] if protocol.max_train is None else ["--max-train", str(protocol.max_train)]
    return ["--task", task, "--method", "houlsby", "--bottleneck", str(BOTTLENECK), "--lr", f"{LEARNING_RATE:g}",
            "--train-pooler", "--precision", "fp32", "--batch-size", "32", *rows,
            "--validation-rows", str(protocol.validation_rows), "--epochs", f"{protocol.epochs:g}",
            "--eval-every", str(protocol.eval_every), "--seed", str(seed), "--backbone", BACKBONE,
            "--save-dtype", "fp16", "--no-progress", "--out", _shown(set_folder(task, seed, folder))]


def _shown(path: Path) -> str:
    """A folder inside the project as the command, run in the project's folder, names it (no absolute path)."""
    return str(path.relative_to(PROJECT_ROOT)) if path.is_relative_to(PROJECT_ROOT) else str(path)


def train_command(task: str, seed: int, folder=LAB11_DIR) -> str:
    return shlex.join(["python", "-m", "adapterlab", "train", *train_arguments(task, seed, folder)])


@dataclass
class TrainedSet:
    """One trained set, loaded: the model (in eval mode), its tokenizer, the backbone it loaded, and the
    run's metrics.json (its dev score, history and configuration)."""

    task: str
    seed: int
    model: nn.Module
    tokenizer: object
    backbone: object
    run: dict

    @property
    def dev_score(self) -> float:
        """The dev score the run reported when it was trained (accuracy for SST-2, MCC for CoLA)."""
        metrics = self.run["metrics"]
        return metrics["matthews"] if self.task == "cola" else metrics["accuracy"]


def open_set(task: str, seed: int, folder=LAB11_DIR) -> TrainedSet:
    """The set of ``task`` and ``seed`` loaded into a fresh copy of the backbone it was trained on."""
    from ...methods.checkpoints import load_adapter_set
    from ...runs.folder import adapter_set_config
    from ...training.backbones import load_backbone

    where = set_folder(task, seed, folder)
    remake = f"make it again with `{train_command(task, seed, folder)} --overwrite` (run in the project's folder)"
    if not (where / "metrics.json").is_file():
        raise FileNotFoundError(f"lab 11's {task} set of seed {seed} is not in {where}; make it with "
                                f"`{train_command(task, seed, folder)}` (run in the project's folder)")
    try:
        run = json.loads((where / "metrics.json").read_text(encoding="utf-8"))
        manifest = adapter_set_config(where)
        holds = (manifest.get("extra", {}).get("task"), manifest.get("extra", {}).get("seed"),
                 run.get("task"), (run.get("config") or {}).get("seed"))
    except (OSError, ValueError, AttributeError) as error:
        raise SetDamaged(f"lab 11's {task} set of seed {seed} in {where} cannot be read ({error}); {remake}") from None
    if holds != (task, seed, task, seed):
        raise SetDamaged(f"{where} should hold lab 11's {task} set of seed {seed}, but its adapter_config.json says "
                         f"task {holds[0]!r}, seed {holds[1]!r} and its metrics.json task {holds[2]!r}, seed "
                         f"{holds[3]!r}; {remake}")
    saved = manifest["backbone"]
    model, tokenizer, info = load_backbone(saved["name"], num_labels=saved["num_labels"], seed=seed)
    try:
        load_adapter_set(model, where)
    except ValueError as error:
        raise SetDamaged(f"lab 11's {task} set of seed {seed} in {where} cannot be loaded ({error}); {remake}") from None
    return TrainedSet(task, seed, model.eval(), tokenizer, info, run)


class SetDamaged(ValueError):
    """A lab 11 set whose folder cannot be read, or holds another task's or seed's set: the message names the
    folder and the command that makes the set again."""


#: Where lab 11's measurements of each set are kept (a run folder holds only what `train` wrote), and the
#: training rows its linear fits read.
ANATOMY_DIR = "anatomy"
FIT_ROWS = 1000


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _data_fingerprint(task: str, seed: int, data_dir=None) -> str:
    """The SHA-256 of the rows a set's measurements read (the task's dev set and its fit rows): measurements
    made on other data (the toy sets, another GLUE copy) are not these."""
    from ...training.data import load_split

    dev = load_split(task, "dev", data_dir)
    fit = load_split(task, "train", data_dir, max_examples=FIT_ROWS, seed=seed)
    return _sha256(json.dumps([dev.texts, dev.labels, fit.texts, fit.labels]).encode())


def measure_set(trained: TrainedSet, data_dir=None, *, scores: bool = True) -> SetAnatomy:
    """Lab 11's measurements of ``trained`` (:func:`.set_anatomy.measure`): on the task's whole dev set, the
    linear fits on :data:`FIT_ROWS` training rows drawn with the set's seed, and the adapters at init from the
    backbone as loaded under that seed. A few minutes on a laptop, the evaluations most of them: ``scores=False``
    leaves those out (:func:`.set_anatomy.measure`)."""
    from ...training.backbones import load_backbone
    from ...training.data import load_split, tokenize

    pretrained, tokenizer, _ = load_backbone(trained.backbone.loaded, num_labels=trained.model.config.num_labels, seed=trained.seed)
    dev = tokenize(load_split(trained.task, "dev", data_dir), tokenizer)
    fit = tokenize(load_split(trained.task, "train", data_dir, max_examples=FIT_ROWS, seed=trained.seed), tokenizer)
    at_init = adapters_at_init(trained.model, pretrained, trained.seed)
    return measure(trained.model, at_init, dev, fit, task=trained.task, seed=trained.seed, scores=scores)


def anatomy_of(task: str, seed: int, folder=LAB11_DIR, *, data_dir=None) -> SetAnatomy:
    """Lab 11's measurements of one set: read from ``<folder>/anatomy/<task>-seed<seed>.json`` when they were made
    from these very adapters on these very rows, else measured (:func:`measure_set`) and written there, so the
    lab reads six sets in seconds and re-measures one live to show the stored numbers are this code's. A record
    without every measurement :class:`.set_anatomy.SetAnatomy` holds now (written before one was added), or whose
    values no longer match the seal written with them (:func:`_seal`), is measured again."""
    where = set_folder(task, seed, folder)
    stored = Path(folder) / ANATOMY_DIR / f"{where.name}.json"
    made_from = {"adapters_sha256": _sha256((where / TENSORS_FILE).read_bytes()) if (where / TENSORS_FILE).is_file()
                 else None, "data_sha256": _data_fingerprint(task, seed, data_dir)}
    if stored.is_file() and made_from["adapters_sha256"]:
        try:  # a record that is damaged, edited or holds other types is measured again, like one of other adapters
            record = json.loads(stored.read_text(encoding="utf-8"))
            if (all(record.get(name) == value for name, value in made_from.items())
                    and set(record.get("anatomy", {})) == {field.name for field in fields(SetAnatomy)}
                    and record.get("anatomy_sha256") == _seal(record["anatomy"])):
                return from_record(record["anatomy"])
        except (ValueError, TypeError, AttributeError, KeyError):
            pass
    measured = measure_set(open_set(task, seed, folder), data_dir)
    anatomy = as_record(measured)
    stored.parent.mkdir(parents=True, exist_ok=True)
    stored.write_text(json.dumps({**made_from, "anatomy": anatomy, "anatomy_sha256": _seal(anatomy)}, indent=1),
                      encoding="utf-8")
    return measured


def _seal(anatomy: dict) -> str:
    """The SHA-256 of a measurement record's values as this code wrote them: a value edited by hand (a number
    changed, a NaN pasted in) no longer matches, and the set is measured again rather than shown as measured."""
    return _sha256(json.dumps(anatomy, sort_keys=True).encode())
