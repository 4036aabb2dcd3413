"""A store of finished training runs, so that a lab shows a result at once and any point can be re-trained.

A run is decided by its *key*: the task, the backbone that really trains (the stand-in when
bert-base-uncased cannot be had), a fingerprint of the exact train and dev rows, the precision it really
trains in (fp32 or bf16, never "auto": :mod:`adapterlab.precision` resolves that first, which may load the
backbone once per machine to probe it), and every training setting that changes the numbers (the seed
among them; the progress bar and the device do not). Two runs with the same key give the same numbers up to the machine's arithmetic, so a
stored run stands in for training again; runs that differ in any part of the key never stand in for
each other.

The store is a folder of JSON files, one per run, named by a hash of the key. Every write goes to a
temporary file first and is renamed into place, so several processes (the shards of a sweep, on one
machine or on a shared disk) can write to one store at once without locks and without a torn file,
and the union of their files is the merged result. Besides the key a record holds the metrics, the
history, the trained parameter count, wall time and the machine it ran on.

Where runs are kept: ``$ADAPTERLAB_RUNS`` or ``runs/store`` in the project (the student's own runs),
and ``data/reference_runs`` (reference runs made with ``adapterlab sweep`` and shipped with the labs).
Labs 6–10 read both, the student's own first. The reference runs are fp32: a lab that reads them asks
for fp32 (``TrainConfig(precision="fp32")``), and a look-up that finds a run stored only in the other
precision warns so, rather than missing it silently.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import math
import os
import platform
import reprlib
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from ..training.backbones import expected_backbone
from ..methods.checkpoints import write_durably
from ..training.data import Split, get_task
from ..training.evaluation import pick_device
from .. import methods
from ..training.config import settings as training_settings
from ..training.experiment import load_splits
from ..training.precision import RESOLVED, Choice, resolve
from ..paths import DATA_DIR, PROJECT_ROOT

STORE_ENV = "ADAPTERLAB_RUNS"
DEFAULT_STORE = PROJECT_ROOT / "runs" / "store"
#: A temporary file in a store older than this (seconds) is what a killed write left.
STALE_SECONDS = 600
REFERENCE_STORE = DATA_DIR / "reference_runs"
def data_fingerprint(*splits: Split) -> str:
    """A short hash of the exact rows (texts and labels, in order) of the given splits."""
    digest = hashlib.sha256()
    for split in splits:
        digest.update(split.encoded_rows)
    return digest.hexdigest()[:16]


def run_key(task: str, config, backbone: str, train_split: Split, eval_split: Split,
            precision: str | None = None, validation_split: Split | None = None) -> dict:
    """What decides a run's numbers, as plain JSON values (see the module docstring). ``precision`` is the one
    the run trains in (default: ``config.precision``, which must then be resolved already).

    The settings are those that change the numbers (:class:`adapterlab.settings.Setting` ``in_key``), the
    peak learning rate in place of ``learning_rate`` (None means the method's default), and of the methods'
    settings only those the run's method reads: full fine-tuning with bottleneck 8 and with 64 are one run,
    and a setting added for a new method leaves every other method's keys as they were. A run selected on
    a validation split carries the split's fingerprint."""
    precision = config.precision if precision is None else precision
    if precision not in RESOLVED:
        raise ValueError(f"a run's key needs the precision it trains in, fp32 or bf16, not {precision!r}: "
                         "resolve it first (adapterlab.precision.resolve or runstore.key_for)")
    key = {
        "task": get_task(task).name,
        "backbone": backbone,
        "data": data_fingerprint(train_split, eval_split),
        "train_rows": len(train_split),
        "eval_rows": len(eval_split),
        "toy_data": train_split.is_toy or eval_split.is_toy,
        "precision": precision,  # at the top level, resolved: runs from before bf16 keep their keys
        "settings": key_settings(config),
    }
    if validation_split is not None:
        key["validation"] = {"data": data_fingerprint(validation_split), "rows": len(validation_split)}
    return key


def key_settings(config) -> dict:
    """The settings part of a run's key (see :func:`run_key`)."""
    method = methods.get(config.method)
    reads = set(method.settings)
    own = {setting.name for setting in methods.registry.method_settings()}
    settings = {"peak_learning_rate": config.peak_learning_rate, **method.key_marks}
    for name, setting in training_settings().items():
        value = getattr(config, name)
        if setting.in_key and not (name in own and name not in reads) and (
                setting.key_when_default or value != setting.default):
            settings[name] = value
    return settings


def ignored_settings(method: str) -> tuple[str, ...]:
    """The training settings ``method`` does not read (they are not in its runs' keys)."""
    reads = set(methods.get(method).settings)
    return tuple(s.name for s in methods.registry.method_settings() if s.name not in reads)


def run_id(key: dict) -> str:
    """The file name of a run: a hash of its key, the same on every machine."""
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]


def machine() -> dict:
    """Where a run was measured: enough to tell two machines' timings apart."""
    return {"platform": platform.platform(terse=True), "machine": platform.machine(),
            "processor": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(), "torch": torch.__version__}


def _record(key: dict, status: str, history, backbone_info) -> dict:
    """What every stored run holds, finished or not: its key, how it ended, its curves, where it ran."""
    return {
        "id": run_id(key),
        "key": key,
        "status": status,
        "metric": history.metric,
        "train_seconds": history.train_seconds,
        "wall_time": history.wall_time,
        "evals": [dict(entry) for entry in history.evals],
        "loss": list(history.loss),
        "backbone_info": backbone_info.describe() if backbone_info is not None else None,
        "machine": machine(),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def make_record(key: dict, result) -> dict:
    """A stored run: its key and what it measured (a :class:`adapterlab.training.TrainResult`)."""
    return _record(key, "complete", result.history, result.backbone_info) | {
        "best_metric": result.best_metric,
        "best_step": result.best_step,
        "metrics": dict(result.metrics),
        "selected_on": result.selected_on,
        **({"validation_metric": result.validation_metric} if result.selected_on == "validation" else {}),
        "trained_parameters": result.trainable["total_trainable"],
        "percent_of_backbone": result.trainable["percent_of_backbone"],
        "examples_per_second": result.history.examples_per_second,
    }


def make_diverged_record(key: dict, error) -> dict:
    """A stored run that diverged (:class:`adapterlab.training.TrainingDiverged`): no metric, the partial
    loss curve and why."""
    return _record(key, "diverged", error.history, error.backbone_info) | {
        "error": str(error), "diverged_at_step": error.step, "best_metric": None, "best_step": None, "metrics": {},
    }


class RunStore:
    """A folder of stored runs (see the module docstring). ``read_only`` stores refuse :meth:`put`."""

    def __init__(self, folder: str | os.PathLike, read_only: bool = False):
        self.folder = Path(folder).expanduser()
        self.read_only = read_only
        if self.folder.exists() and not self.folder.is_dir():
            raise ValueError(f"run store {self.folder} exists and is not a folder: name a folder for the runs")

    def __repr__(self) -> str:
        return f"RunStore({str(self.folder)!r})"

    def path(self, key: dict) -> Path:
        return self.folder / f"{run_id(key)}.json"

    def get(self, key: dict) -> dict | None:
        """The stored run with exactly this key, or None (also for a damaged record: the run is trained again)."""
        path = self.path(key)
        if not path.is_file():
            return None
        record = _read(path)
        return record if record is not None and record.get("key") == key else None

    def check_writable(self) -> None:
        """Raise a ValueError that says why when runs cannot be stored here (a read-only store or folder, a
        file in the way); clear what killed writers left (:func:`clear_stale_temporaries`)."""
        from .folder import os_error_reason

        if self.read_only:
            raise ValueError(f"{self.folder} is a read-only run store (reference runs); pass --store DIR to store "
                             "runs elsewhere")
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            handle, probe = tempfile.mkstemp(prefix=".write-check-", suffix=".tmp", dir=self.folder)
            os.close(handle)
            os.unlink(probe)
        except OSError as error:
            raise ValueError(f"the run store {self.folder} cannot be written ({os_error_reason(error)}); pass "
                             "--store DIR (or set $ADAPTERLAB_RUNS) to a folder you can write to") from None
        self.clear_stale_temporaries()

    def clear_stale_temporaries(self, older_than: float = STALE_SECONDS) -> list[Path]:
        """Delete the temporary files of writes a kill cut short (``.ID.json.XXXX.tmp`` older than
        ``older_than`` seconds: a live write takes milliseconds); return them."""
        cleared = []
        now = time.time()
        for path in self.folder.glob(".*.json.*.tmp"):
            try:
                if now - path.stat().st_mtime > older_than:
                    path.unlink()
                    cleared.append(path)
            except OSError:
                continue  # gone already (another shard cleared it), or not ours to delete
        return cleared

    def put(self, record: dict) -> Path:
        """Store a run whole or not at all (temporary file, sync, rename); return its path."""
        if self.read_only:
            raise PermissionError(f"{self.folder} is a read-only run store (reference runs); store runs elsewhere")
        self.folder.mkdir(parents=True, exist_ok=True)
        self.clear_stale_temporaries()
        path = self.path(record["key"])
        write_durably(self.folder, path.name, (json.dumps(_finite(record), indent=1, sort_keys=True) + "\n").encode())
        return path

    def records(self) -> list[dict]:
        """Every stored run, in file-name order (unreadable files are skipped)."""
        if not self.folder.is_dir():
            return []
        found = (_read(path) for path in sorted(self.folder.glob("*.json")))
        return [record for record in found if record is not None]

    def __len__(self) -> int:
        return len(self.records())


#: The range of each metric a run is scored by (:func:`adapterlab.training.data.compute_metrics`).
METRIC_RANGES = {"accuracy": (0.0, 1.0), "f1": (0.0, 1.0), "matthews": (-1.0, 1.0)}


def record_problem(record) -> str | None:
    """What keeps a parsed record from being a stored run this module wrote (None when it is one): a record
    edited by hand or damaged must not steer a selection or count twice, so every field a comparison reads is
    checked — the key (and that ``id`` is its hash), the seed, the status, and each score's type and range."""
    if not isinstance(record, dict):
        return f"it is a JSON {type(record).__name__}, not an object"
    key = record.get("key")
    if not isinstance(key, dict) or not isinstance(key.get("settings"), dict):
        return "it has no key with settings"
    seed = key["settings"].get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int):
        return f"its key's settings.seed is {reprlib.repr(seed)}, not an integer"
    status = record.get("status", "complete")  # runs stored before statuses were recorded are complete
    if status not in ("complete", "diverged"):
        return f"its status {reprlib.repr(status)} is neither complete nor diverged"
    metric = record.get("metric")
    if not isinstance(metric, str):
        return "it names no metric"
    if metric not in METRIC_RANGES:
        return f"its metric {reprlib.repr(metric)} is none of {', '.join(METRIC_RANGES)}"
    scores = [("", record, "best_metric")] if status == "complete" else []
    if status == "complete" and (record.get("selected_on") == "validation" or "validation_metric" in record):
        scores.append(("", record, "validation_metric"))
    evals = record.get("evals", [])
    if not isinstance(evals, list) or not all(isinstance(entry, dict) for entry in evals):
        return "its evals are not a list of objects"
    for number, entry in enumerate(evals):
        scores.append((f"evals[{number}].", entry, metric))
        if "validation" in entry:
            scores.append((f"evals[{number}].validation.", entry["validation"], metric))
        if isinstance(entry.get("step"), bool) or not isinstance(entry.get("step"), int):
            return f"its evals[{number}].step is {reprlib.repr(entry.get('step'))}, not an integer"
    for where, holder, name in scores:
        problem = _score_problem(where + name, holder, name, metric)
        if problem is not None:
            return problem
    count = record.get("trained_parameters", 0)
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        return f"its trained_parameters is {reprlib.repr(count)}, not a count"
    expected = run_id(key)
    if record.get("id", expected) != expected:
        return f"its id {reprlib.repr(record['id'])} is not its key's hash {expected} (a copy of another run's, edited)"
    return None


def _score_problem(field: str, holder, name: str, metric: str) -> str | None:
    """Why ``holder[name]`` (the record's ``field``) is not a possible score of ``metric``; None when it is."""
    if not isinstance(holder, dict) or name not in holder:
        return f"it has no {field}"
    value = holder[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return f"its {field} is {reprlib.repr(value)}, not a number"
    low, high = METRIC_RANGES[metric]
    if not low <= value <= high:
        return f"its {field} is {value!r}, outside {metric}'s range [{low:g}, {high:g}]"
    return None


_WARNED: set[str] = set()


def _read(path: Path) -> dict | None:
    """A stored record, or None (with one warning naming the file) when it cannot be read or is damaged:
    a bad record is skipped, never trusted and never fatal."""
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        problem = record_problem(record)
        if problem is None and path.stem != run_id(record["key"]):
            problem = (f"it holds the run {run_id(record['key'])}.json, not {path.name} (a copy of another run's "
                       "record)")
    except RecursionError:
        problem = "it is not valid JSON (nested too deeply)"
    except UnicodeDecodeError:
        problem = "it is not text"
    except ValueError as error:
        problem = f"it is not valid JSON ({error})"
    except OSError as error:
        problem = f"it cannot be read ({error.strerror or error})"
    if problem is None:
        return record
    if str(path) not in _WARNED:
        _WARNED.add(str(path))
        warnings.warn(f"skipping the stored run {path}: {problem}; delete the file (the run is trained again "
                      "when asked for)", stacklevel=3)
    return None


def _finite(value):
    """JSON has no NaN: store a non-finite float as None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def store_folder(value: str | None) -> Path:
    """The student's store: ``$ADAPTERLAB_RUNS`` (a relative one read against the project folder, as
    ``$ADAPTERLAB_DATA`` is, so the command line and the notebooks in labs/ share one store), else runs/store."""
    if not value:
        return DEFAULT_STORE
    folder = Path(value).expanduser()
    return folder if folder.is_absolute() else PROJECT_ROOT / folder


def default_stores() -> list[RunStore]:
    """Where the labs look a run up: the student's own store, then the shipped reference runs."""
    own = RunStore(store_folder(os.environ.get(STORE_ENV)))
    return [own, RunStore(REFERENCE_STORE, read_only=True)]


@dataclass
class Lookup:
    """A run found in a store or trained now: ``record`` as stored, ``stored`` says which, and where;
    ``result`` is the TrainResult (with the trained model) of a run trained now."""

    record: dict
    stored: bool
    store: RunStore
    result: object = None


def precision_for(task: str, config, *, backbone: str = "bert-base-uncased", fallback: bool = True,
                  load=None) -> Choice:
    """The precision :func:`run_experiment` would train ``config`` in here. Only "auto" without a cached probe
    loads the backbone, with ``load()`` when given (the panel's loaded copy), else :func:`load_backbone`."""
    name = expected_backbone(backbone, fallback)

    def load_model():
        if load is not None:
            return load()
        from ..training import backbones  # looked up now, so that a test can replace load_backbone

        return backbones.load_backbone(name, num_labels=get_task(task).num_labels, fallback=False, seed=config.seed)[0]

    return resolve(config.precision, name, load=load_model, device=pick_device(config.device))


def key_for(task: str, config, *, backbone: str = "bert-base-uncased", data_dir=None, max_train: int | None = None,
            max_eval: int | None = None, fallback: bool = True, load=None) -> dict:
    """The key of the run :func:`run_experiment` would train with these arguments; reads the data, and the
    backbone only to probe the precision "auto" once per machine (:func:`precision_for`)."""
    choice = precision_for(task, config, backbone=backbone, fallback=fallback, load=load)
    train_split, eval_split, validation_split = load_splits(task, data_dir, max_train, max_eval, config.seed,
                                                            config.validation_rows)
    return run_key(task, config, expected_backbone(backbone, fallback), train_split, eval_split, choice.precision,
                   validation_split)


def find(key: dict, stores: list[RunStore] | None = None) -> Lookup | None:
    """The run with this key from the first store that holds it (default: :func:`default_stores`), or None."""
    for store in default_stores() if stores is None else stores:
        record = store.get(key)
        if record is not None:
            return Lookup(record, True, store)
    return None


def warn_if_stored_in_other_precision(key: dict, stores: list[RunStore] | None = None) -> None:
    """Called when ``key`` is not stored: warn when the same run is stored in the other precision, which does
    not stand in for it (the reference runs are fp32; "auto" may have resolved to bf16 here)."""
    other = next(p for p in RESOLVED if p != key["precision"])
    article = "an" if other == "fp32" else "a"
    found = find({**key, "precision": other}, stores)
    if found is not None:
        warnings.warn(f"no {key['precision']} run of these settings is stored, but {article} {other} one is (in "
                      f"{found.store.folder.name}); runs of different precisions do not stand in for each other: "
                      f"pass precision={other!r} in the TrainConfig to read it", stacklevel=3)


def stored_runs(task: str, configs, **load_args) -> list[dict | None]:
    """The stored record of each config's run (None where it is not stored), without training anything.

    ``load_args`` are :func:`key_for`'s (backbone, data_dir, max_train, max_eval, fallback) and
    ``stores``. Labs 6-10 read their multi-seed figures this way, with ``precision="fp32"`` in the configs
    for the reference runs; :func:`summarize` groups the records.
    """
    stores = load_args.pop("stores", None)
    records = []
    for config in configs:
        key = key_for(task, config, **load_args)
        found = find(key, stores)
        if found is None:
            warn_if_stored_in_other_precision(key, stores)
        records.append(None if found is None else found.record)
    return records


def run_or_load(task: str, config, *, backbone: str = "bert-base-uncased", data_dir=None,
                max_train: int | None = None, max_eval: int | None = None, fallback: bool = True,
                stores: list[RunStore] | None = None, retrain: bool = False, callback=None,
                trainer=None, loader=None) -> Lookup:
    """A stored run with these settings, or train it now and store it (in the first writable store).

    ``retrain=True`` trains again even when the run is stored (and replaces the stored record). The
    key is found without loading the backbone: only the data is read, so a stored run answers at once.
    Runs stopped early are not stored: they would stand in for a full run. A run that diverges is a
    result too (an init scale or learning rate that blows up): it is stored and returned with
    ``status`` "diverged", its message in ``error`` and no metric. ``trainer`` replaces
    :func:`adapterlab.training.run_experiment` (same arguments); ``loader`` goes to it and to the precision
    probe (:func:`precision_for`), so that a caller holding the backbone loaded (the panel) lends it. The
    precision is resolved before the key is made; a run is stored under the precision it really trained in.
    """
    from ..training import TrainingDiverged, run_experiment

    trainer = run_experiment if trainer is None else trainer
    stores = default_stores() if stores is None else list(stores)
    writable = next((store for store in stores if not store.read_only), None)
    if writable is None:
        raise ValueError("no writable run store: give one that is not read-only")
    load = None
    if loader is not None:
        def load():
            return loader(task, backbone, data_dir, max_train, max_eval, fallback, config.seed).model
    key = key_for(task, config, backbone=backbone, data_dir=data_dir, max_train=max_train, max_eval=max_eval,
                  fallback=fallback, load=load)
    if not retrain:
        found = find(key, stores)
        if found is not None:
            return found
        warn_if_stored_in_other_precision(key, stores)
    lend = {} if loader is None else {"loader": loader}
    try:
        result = trainer(task, config, backbone=backbone, data_dir=data_dir, max_train=max_train,
                         max_eval=max_eval, callback=callback, fallback=fallback, **lend)
    except TrainingDiverged as error:
        record = make_diverged_record(_as_trained(key, error.precision), error)
        writable.put(record)
        return Lookup(record, False, writable)
    record = make_record(_as_trained(key, result.precision), result)
    if not result.interrupted:
        writable.put(record)
    return Lookup(record, False, writable, result)


def _as_trained(key: dict, choice: Choice | None) -> dict:
    """The key with the precision the run really trained in (the same as the key's unless the probe's cache
    could not be written and a second probe decided otherwise)."""
    return key if choice is None else {**key, "precision": choice.precision}


def history_of(record: dict):
    """The :class:`adapterlab.training.History` of a stored run, enough to draw its training figure."""
    from ..training import History

    loss = list(record.get("loss") or [])
    return History(task=record["key"]["task"], metric=record["metric"], steps=list(range(1, len(loss) + 1)),
                   loss=loss, evals=[dict(entry) for entry in record.get("evals") or []],
                   train_seconds=record.get("train_seconds") or 0.0, wall_time=record.get("wall_time") or 0.0)


def summarize(records: list[dict], by: tuple[str, ...]) -> list[dict]:
    """Group runs by settings named in ``by`` (keys of ``record["key"]["settings"]``, or "task", "backbone")
    and give each group's seeds, mean, sample standard deviation and values of the best metric, and how
    many of its runs diverged (they have no metric and are left out of the mean)."""
    groups: dict[tuple, list[dict]] = {}
    unique = {record.get("id") or run_id(record["key"]): record for record in records}  # a run counts once
    for record in unique.values():
        key = record["key"]
        fields = tuple(key["settings"].get(name, key.get(name)) for name in by)
        groups.setdefault(fields, []).append(record)
    rows = []
    for fields, members in groups.items():
        members.sort(key=lambda r: r["key"]["settings"]["seed"])
        values = [m["best_metric"] for m in members if m["best_metric"] is not None]
        mean = sum(values) / len(values) if values else float("nan")
        spread = (math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
                  if len(values) > 1 else float("nan"))
        rows.append({**dict(zip(by, fields)), "seeds": [m["key"]["settings"]["seed"] for m in members],
                     "values": values, "mean": mean, "std": spread, "n": len(values),
                     "diverged": sum(m.get("status") == "diverged" for m in members)})
    return rows
