"""GLUE tasks: find the data, read it, subset it, tokenise it once, and batch it with little padding.

Where the rows come from, in order (the first that answers wins):

1. a GLUE folder in the original GLUE TSV layout (``SST-2/train.tsv`` …), named by the ``data_dir``
   argument or the ``ADAPTERLAB_DATA`` environment variable (a relative value is read against the
   project folder, so the command line and the notebooks in ``labs/`` read the same folder; one that is
   not a folder is an error);
2. the Hugging Face hub (``nyu-mll/glue``) through ``datasets`` — only when the hub answers within two
   seconds and neither ``HF_HUB_OFFLINE`` nor ``HF_DATASETS_OFFLINE`` is set, so that an offline laptop
   never waits on it;
3. the project's own toy sets in ``data/toy/`` (same layout, synthetic, a few hundred rows). They exist
   so that tests and demos run anywhere; every output made from them says ``TOY DATA``.

Why batching matters here: SST-2 sentences are short (about 13 WordPiece tokens on average), so a batch
padded to a fixed 128 tokens is mostly padding. Batches are padded to their own longest sequence, and the
``grouped`` order puts sequences of similar length together (sorting inside large random chunks, then
shuffling the batches) so that padding all but disappears while the order stays random.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import itertools
import json
import os
import random
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..paths import DATA_DIR, project_path
from ..validation import check_positive_int
from .data_errors import DataError
from .hub import hub_reachable
from .own_files import check_file, read_rows

DATA_ENV = "ADAPTERLAB_DATA"
HUB_DATASET = "nyu-mll/glue"
TOY_DIR = DATA_DIR / "toy"
SPLITS = ("train", "dev")
ORDERS = ("grouped", "shuffled", "sequential")
SOURCES = ("auto", "glue", "hub", "toy")
METRICS = ("accuracy", "matthews", "f1")


@dataclass(frozen=True)
class TaskSpec:
    """One GLUE task: where its files are, how their columns are laid out, and how it is scored."""

    name: str  # "sst2"
    glue_folder: str  # "SST-2": the folder inside a GLUE download
    num_labels: int
    metric: str  # the main metric: "accuracy", "matthews" or "f1"
    label_names: tuple[str, ...]  # label id i means label_names[i]
    num_columns: int  # tab-separated fields per row of train.tsv / dev.tsv
    text_columns: tuple[int, ...]  # one column, or two for a sentence pair
    label_column: int
    header: str | None  # the label column's name in the header row; None: the file has no header
    label_values: tuple[str, ...] = ("0", "1")  # how label id i is written in the TSV
    hub_name: str = ""  # the nyu-mll/glue configuration; defaults to ``name``
    hub_fields: tuple[str, ...] = ("sentence",)
    #: The training split holds every phrase of its sentences' parse trees (SST-2): its rows contain one another,
    #: so validation rows drawn at random would also sit, word for word, inside rows that train.
    nested_rows: bool = False
    #: A task of the user's own files (:func:`own_task`): (train file, dev file), read with ``datasets``, whose
    #: columns ``hub_fields`` (the texts) and ``label_field`` hold the rows. Empty for GLUE's tasks.
    files: tuple[str, ...] = ()
    label_field: str = ""

    @property
    def is_pair(self) -> bool:
        return len(self.text_columns) == 2

    @property
    def metric_names(self) -> tuple[str, ...]:
        """What :func:`compute_metrics` returns for this task, the main metric first."""
        return (self.metric,) if self.metric == "accuracy" else (self.metric, "accuracy")


TASKS: dict[str, TaskSpec] = {
    "sst2": TaskSpec(
        name="sst2", glue_folder="SST-2", num_labels=2, metric="accuracy",
        label_names=("negative", "positive"),
        num_columns=2, text_columns=(0,), label_column=1, header="label", nested_rows=True,
    ),
    "cola": TaskSpec(
        name="cola", glue_folder="CoLA", num_labels=2, metric="matthews",
        label_names=("unacceptable", "acceptable"),
        num_columns=4, text_columns=(3,), label_column=1, header=None,
    ),
    "mrpc": TaskSpec(
        name="mrpc", glue_folder="MRPC", num_labels=2, metric="f1",
        label_names=("not_equivalent", "equivalent"),
        num_columns=5, text_columns=(3, 4), label_column=0, header="Quality",
        hub_fields=("sentence1", "sentence2"),
    ),
    "rte": TaskSpec(
        name="rte", glue_folder="RTE", num_labels=2, metric="accuracy",
        label_names=("entailment", "not_entailment"),
        num_columns=4, text_columns=(1, 2), label_column=3, header="label",
        label_values=("entailment", "not_entailment"), hub_fields=("sentence1", "sentence2"),
    ),
}


def get_task(task: str | TaskSpec) -> TaskSpec:
    if isinstance(task, TaskSpec):
        return task
    if str(task) in _OWN_TASKS:  # an own task, registered by own_task under its fingerprint
        return _OWN_TASKS[str(task)]
    if str(task).startswith(OWN_PREFIX):
        raise ValueError(f"{task} is a task of your own files: pass the same --train-file, --dev-file, "
                         "--text-column and --label-column it was trained with (and its --metric, if it was given one)")
    key = str(task).lower().replace("-", "")
    if key not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    return TASKS[key]


@dataclass
class Split:
    """The rows of one split of one task, and where they came from."""

    task: TaskSpec
    split: str  # "train" or "dev"
    texts: list  # list[str], or list[tuple[str, str]] for a sentence-pair task
    labels: list[int]
    #: "the GLUE folder (SST-2/train.tsv)" — relative to the data folder, so that no output shows where a
    #: machine keeps its data —, "HF hub nyu-mll/glue (sst2, train)", or "TOY DATA (data/toy/…)".
    source: str
    is_toy: bool
    total_rows: int | None = None  # rows in the source before subsetting; None: this is all of them
    subset: str = ""  # how the rows were chosen, e.g. "stratified, seed 0"

    def __len__(self) -> int:
        return len(self.labels)

    @functools.cached_property
    def encoded_rows(self) -> bytes:
        """The rows (texts and labels, in order) with the task and split, as the run keys hash them: encoded
        once, since a split's rows are never changed after it is made and a sweep's lookups hash them hundreds
        of times."""
        return json.dumps([self.task.name, self.split, self.texts, self.labels]).encode()

    def label_counts(self) -> dict[str, int]:
        counts = collections.Counter(self.labels)
        return {name: counts.get(i, 0) for i, name in enumerate(self.task.label_names)}

    def describe(self) -> str:
        """One line for logs and notebooks: task, split, rows, labels, and the source by name."""
        total = self.total_rows if self.total_rows is not None else len(self)
        rows = f"{len(self):,} rows" if total == len(self) else f"{len(self):,} of {total:,} rows ({self.subset})"
        labels = " / ".join(f"{name} {n:,}" for name, n in self.label_counts().items())
        if self.is_toy:
            where = f"from {self.source} — not the real task"
        else:
            where = f"from {self.source}"
        return f"{self.task.glue_folder} {self.split}: {rows} [{labels}] {where}"


# --------------------------------------------------------------------------- finding and reading


def glue_from_environment() -> Path | None:
    """The folder ``$ADAPTERLAB_DATA`` names (None when it is unset or empty), whether or not it exists.

    A relative value is read against the project folder (the one holding ``data/`` and ``labs/``), not
    the current one: the command line runs in the project folder and the notebooks in ``labs/``, and
    both must read the same data. ``~`` is expanded.
    """
    setting = os.environ.get(DATA_ENV)
    if not setting:
        return None
    path = Path(setting).expanduser()
    return path if path.is_absolute() else project_path(path).resolve()


def locate_glue(data_dir: str | os.PathLike | None = None) -> Path | None:
    """The GLUE folder to read: ``data_dir`` if given (relative to the current folder), else
    ``$ADAPTERLAB_DATA`` (see :func:`glue_from_environment`); None unless it is a folder. Lab 0 prints it."""
    path = Path(data_dir).expanduser() if data_dir else glue_from_environment()
    return path if path is not None and path.is_dir() else None


def read_glue_tsv(path: str | os.PathLike, task: str | TaskSpec) -> tuple[list, list[int]]:
    """Texts and label ids of one GLUE train/dev TSV file.

    Quoting is off: GLUE rows hold bare ``"`` characters that a CSV reader would swallow. The last row may
    lack a newline (CoLA's dev.tsv does). Every problem raises :class:`DataError` with the file and line.
    """
    spec = get_task(task)
    path = Path(path)
    if not path.is_file():
        raise DataError(
            f"missing file; expected the GLUE layout <folder>/{spec.glue_folder}/{path.name}. "
            f"Point {DATA_ENV} (or data_dir=) at a folder holding {spec.glue_folder}/train.tsv and "
            f"{spec.glue_folder}/dev.tsv, e.g. `export {DATA_ENV}=/path/to/glue_data`",
            path,
        )
    stat = path.stat()
    texts, labels = _read_glue_rows(path.resolve(), stat.st_mtime_ns, stat.st_size, spec)
    return list(texts), list(labels)


@functools.lru_cache(maxsize=8)
def _read_glue_rows(path: Path, mtime_ns: int, size: int, spec: TaskSpec) -> tuple[tuple, tuple]:
    """:func:`read_glue_tsv`'s parse, kept while the file is unchanged (its time and size are in the key): a
    sweep's lookups read the same file for every seed."""
    try:
        text = path.read_bytes().decode("utf-8-sig")  # MRPC's GLUE files start with a byte-order mark
    except UnicodeDecodeError as error:
        raise DataError(f"not UTF-8 text ({error})", path) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the newline that ends the last row
    if not lines:
        raise DataError("empty file; expected GLUE TSV rows", path)

    value_to_id = {value: i for i, value in enumerate(spec.label_values)}
    texts, labels = [], []
    for number, line in enumerate(lines, start=1):
        fields = line.rstrip("\r").split("\t")
        if len(fields) != spec.num_columns:
            raise DataError(
                f"expected {spec.num_columns} tab-separated columns for {spec.glue_folder}, found {len(fields)}",
                path, number,
            )
        value = fields[spec.label_column].strip()
        if number == 1 and spec.header is not None:
            if value != spec.header:
                raise DataError(
                    f"expected a header row whose column {spec.label_column + 1} is {spec.header!r}, "
                    f"found {value!r}", path, number,
                )
            continue
        if value not in value_to_id:
            if spec.label_values == ("0", "1") and not _is_int(value):
                problem = f"label {value!r} is not an integer"
            else:
                problem = f"label {value!r} is outside the task's labels"
            raise DataError(f"{problem}; {spec.name} labels are {', '.join(spec.label_values)}", path, number)
        sentences = tuple(fields[c].strip() for c in spec.text_columns)
        texts.append(sentences if spec.is_pair else sentences[0])
        labels.append(value_to_id[value])
    if not labels:
        raise DataError("no data rows after the header", path)
    if not any(map(any, texts) if spec.is_pair else texts):
        raise DataError("every row's text is empty, so there is nothing to learn from; check the file's columns", path)
    return tuple(texts), tuple(labels)


OWN_PREFIX = "own-"
#: The own tasks registered in this process, by name: apart from GLUE's TASKS, whose table the command line's
#: choices and every list of tasks read.
_OWN_TASKS: dict[str, TaskSpec] = {}
#: The rows of each own task registered in this process, by task name and split: parsed from the bytes its
#: fingerprint was made of, so that the rows trained and scored are the rows the name stands for, even when a
#: file is edited in place afterwards (under the same size and time).
_OWN_ROWS: dict[str, dict[str, tuple[list, list[int]]]] = {}


#: What an own task may be scored by, as the command line names it: GLUE's three (F1 of label id 1, as MRPC's).
OWN_METRICS = {"accuracy": "accuracy", "f1": "f1", "mcc": "matthews"}


def own_task(train_file, dev_file, text_columns, label_column: str, trained_as: str | None = None,
             metric: str = "accuracy") -> TaskSpec:
    """A task of the user's own labelled sentences (one text column) or sentence pairs (two): a CSV, TSV or
    JSON(-lines) train file and dev file, read in memory (:mod:`.own_files`: nothing is copied anywhere) and
    checked as GLUE's files are. The classes are the train file's label values (sorted); the task is scored by
    ``metric`` (:data:`OWN_METRICS`: accuracy, F1 of the second class of two, as GLUE scores MRPC, or the Matthews
    correlation), which selects the evaluation a run keeps. Its name carries a fingerprint of both files, the
    columns and a metric other than accuracy, ``own-<12 hex digits>``, so that runs
    of other files never share a key; the task and its rows are registered under it for the rest of the process
    (``get_task`` and :func:`load_split` find them). ``trained_as``: the name a saved set was trained under; other
    files are refused by their fingerprint before their rows are read (their labels may not even be the set's)."""
    text_columns = tuple(text_columns)
    if metric not in OWN_METRICS:
        raise DataError(f"the metric {metric!r} is none of {', '.join(OWN_METRICS)}")
    if len(text_columns) not in (1, 2):
        raise DataError(f"give one text column (sentences) or two (sentence pairs); got {len(text_columns)}")
    if label_column in text_columns:
        raise DataError(f"the column {label_column!r} is both a text column and the label column: a classifier would "
                        "learn to read its own labels; pass the class's column as --label-column")
    paths = tuple(Path(f).expanduser().resolve() for f in (train_file, dev_file))
    for path in paths:
        check_file(path)
    contents = [path.read_bytes() for path in paths]  # read once: the rows parsed are the bytes fingerprinted
    digest = hashlib.sha256(repr((text_columns, label_column) + ((metric,) if metric != "accuracy" else ())).encode())
    for data in contents:
        digest.update(data)
    name = OWN_PREFIX + digest.hexdigest()[:12]
    if trained_as is not None and name != trained_as:
        raise DataError(f"these are not the files the adapter set was trained on (their fingerprint is {name}, the "
                        f"training files' {trained_as}); a fingerprint covers both files and the columns, so pass the "
                        "same --train-file, --dev-file, --text-column, --label-column and --metric as train")
    (train_texts, train_values), (dev_texts, dev_values) = (
        read_rows(path, data, text_columns, label_column) for path, data in zip(paths, contents))
    values = sorted(set(train_values), key=lambda v: (not _is_int(v), int(v) if _is_int(v) else 0, v))
    if len(values) < 2:
        raise DataError(f"the label column {label_column!r} holds one value ({values}); a classifier needs two or "
                        "more classes", paths[0])
    spellings: dict[str, list[str]] = {}
    for value in values:
        spellings.setdefault(value.casefold(), []).append(value)
    twins = next((found for found in spellings.values() if len(found) > 1), None)
    if twins:  # "Positive" and "positive" would train as two classes, each with half the examples
        raise DataError(f"the labels {' and '.join(map(repr, twins))} differ only in capitals, so they would be "
                        f"{len(twins)} classes; write each class one way in both files", paths[0])
    if metric == "f1" and len(values) != 2:
        raise DataError(f"F1 scores the second class of a two-class task (as GLUE scores MRPC); the label column "
                        f"{label_column!r} holds {len(values)} classes ({', '.join(values)}): pass --metric accuracy "
                        "or mcc", paths[0])
    value_to_id = {value: i for i, value in enumerate(values)}
    outside = next((i for i, value in enumerate(dev_values) if value not in value_to_id), None)
    if outside is not None:  # checked now rather than after training
        raise DataError(f"row {outside + 1}: label {dev_values[outside]!r} is outside the task's classes "
                        f"({', '.join(values)}, the train file's labels)", paths[1])
    spec = TaskSpec(name=name, glue_folder=name, num_labels=len(values), metric=OWN_METRICS[metric],
                    label_names=tuple(values), num_columns=0, text_columns=tuple(range(len(text_columns))),
                    label_column=-1, header=None, label_values=tuple(values), hub_fields=text_columns,
                    files=tuple(map(str, paths)), label_field=label_column)
    _OWN_ROWS[name] = {"train": (train_texts, [value_to_id[v] for v in train_values]),
                       "dev": (dev_texts, [value_to_id[v] for v in dev_values])}
    _OWN_TASKS[spec.name] = spec
    return spec


def dev_rows_in_train(spec: TaskSpec) -> tuple[int, int]:
    """How many of an own task's dev rows also occur, word for word, among its train rows, and how many dev rows
    it has: those rows score what the model remembers, not how it generalises (the course's own protocol keeps
    SST-2's apart to the phrase)."""
    train, dev = set(_OWN_ROWS[spec.name]["train"][0]), _OWN_ROWS[spec.name]["dev"][0]
    return sum(text in train for text in dev), len(dev)


def _is_int(value: str) -> bool:
    try:
        int(value)
    except ValueError:
        return False
    return True


def _check_split(split: str) -> str:
    split = {"validation": "dev"}.get(split, split)
    if split not in SPLITS:
        raise ValueError(f"split must be 'train' or 'dev' (GLUE test labels are hidden); got {split!r}")
    return split


def _load_hub(spec: TaskSpec, split: str) -> tuple[list, list[int], str]:
    import datasets

    config = spec.hub_name or spec.name
    rows = datasets.load_dataset(HUB_DATASET, config, split="validation" if split == "dev" else split)
    columns = [rows[name] for name in spec.hub_fields]
    texts = list(zip(*columns)) if spec.is_pair else list(columns[0])
    labels = [int(label) for label in rows["label"]]
    where = f"HF hub {HUB_DATASET} ({config}, {split})"
    for number, label in enumerate(labels):
        if not 0 <= label < spec.num_labels:
            raise DataError(f"row {number}: label {label} is outside the task's labels 0..{spec.num_labels - 1}", where)
    return texts, labels, where


def _relative(path: Path) -> str:
    try:
        return str(path.relative_to(TOY_DIR.parent.parent))
    except ValueError:
        return str(path)


def check_glue_setting(data_dir: str | os.PathLike | None = None, task: str | TaskSpec = "sst2") -> None:
    """Raise :class:`DataError` if ``data_dir``, or else ``$ADAPTERLAB_DATA``, names something that is
    not a folder: a mistyped path must stop the run, not let it train on other data without a word."""
    spec = get_task(task)
    if data_dir is not None:
        if not Path(data_dir).expanduser().is_dir():
            raise DataError(
                f"missing folder; data_dir must be a GLUE folder holding {spec.glue_folder}/train.tsv", data_dir
            )
        return
    path = glue_from_environment()
    if path is not None and not path.is_dir():
        read_as = "" if Path(os.environ[DATA_ENV]).expanduser().is_absolute() else f" (read as {path})"
        raise DataError(
            f"{DATA_ENV}={os.environ[DATA_ENV]!r}{read_as} is not a folder; point it at a GLUE folder holding "
            f"{spec.glue_folder}/ (a relative path is read against the project folder), or unset it to use "
            "the hub or the toy sets"
        )


def load_split(
    task: str | TaskSpec,
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    max_examples: int | None = None,
    seed: int = 0,
    *,
    source: str = "auto",
) -> Split:
    """One split of a task from the first source that has it (see the module docstring).

    ``source`` forces one source: "glue" (a GLUE folder must exist), "hub", or "toy". A ``data_dir`` or
    ``$ADAPTERLAB_DATA`` that is not a folder is an error, never a silent fall-back to other data (a
    relative ``$ADAPTERLAB_DATA`` is read against the project folder, see :func:`glue_from_environment`).
    ``max_examples`` keeps a seeded, label-stratified subset (see :func:`stratified_indices`). Every lab
    that reads sentences loads them with it (labs 0, 2, 3 and 5-9).
    """
    spec = get_task(task)
    split = _check_split(split)
    if spec.files:
        texts, labels = _OWN_ROWS[spec.name][split]
        return take_subset(Split(spec, split, list(texts), list(labels), Path(spec.files[SPLITS.index(split)]).name, is_toy=False),
                           max_examples, seed)
    if source not in SOURCES:
        raise ValueError(f"source must be one of {', '.join(SOURCES)}; got {source!r}")
    if source in ("auto", "glue") or data_dir is not None:  # a forced hub or toy source ignores the variable
        check_glue_setting(data_dir, spec)
    glue = locate_glue(data_dir)

    loaded = None
    if source in ("auto", "glue") and glue is not None:
        path = glue / spec.glue_folder / f"{split}.tsv"
        texts, labels = read_glue_tsv(path, spec)
        loaded = Split(spec, split, texts, labels, f"the GLUE folder ({spec.glue_folder}/{split}.tsv)", is_toy=False)
    elif source == "glue":
        raise DataError(f"no GLUE folder: pass data_dir= or set {DATA_ENV} to a folder holding {spec.glue_folder}/")
    elif source == "hub" or (source == "auto" and hub_reachable()):
        try:
            texts, labels, where = _load_hub(spec, split)
            loaded = Split(spec, split, texts, labels, where, is_toy=False)
        except DataError:
            raise
        except Exception as error:  # a network or hub failure: say so, then use the toy set (auto only)
            if source == "hub":
                raise
            warnings.warn(f"could not load {HUB_DATASET} {spec.name} from the hub ({error}); using the toy set")
    if loaded is None:
        path = TOY_DIR / spec.glue_folder / f"{split}.tsv"
        texts, labels = read_glue_tsv(path, spec)
        loaded = Split(spec, split, texts, labels, f"TOY DATA ({_relative(path)})", is_toy=True)

    return take_subset(loaded, max_examples, seed)


def take_subset(split: Split, max_examples: int | None, seed: int = 0) -> Split:
    """A seeded, label-stratified subset of ``max_examples`` rows (the split itself when it has no more)."""
    if max_examples is None or max_examples >= len(split):
        return split
    keep = stratified_indices(split.labels, max_examples, seed)
    return dataclasses.replace(split, texts=[split.texts[i] for i in keep], labels=[split.labels[i] for i in keep],
                               total_rows=split.total_rows or len(split),
                               subset=", ".join(filter(None, (split.subset, f"stratified, seed {seed}"))))


#: The validation rows are carved with this seed whatever the run's seed (the paper's arXiv number), so
#: every run of a task — every method, learning rate and seed — is selected on the same rows.
VALIDATION_SEED = 1902


def carve_validation(train: Split, rows: int) -> tuple[Split, Split]:
    """Split a task's training rows in two: ``rows`` label-stratified rows to select on (the validation
    split, fixed by :data:`VALIDATION_SEED`) and the rest to train on, disjoint. Model selection — the step
    to keep, the learning rate — reads validation, so the dev set can report a score nothing chose.

    Where the rows contain one another (``nested_rows``: SST-2's training file holds every phrase of every
    sentence), disjoint rows are not independent rows: a validation phrase found word for word inside a
    training phrase has had its label learned. There the validation rows are whole sentences — rows that no
    other row contains (:func:`outermost_rows`) — and every row inside one of them leaves the training side,
    so no validation row contains a training row or sits inside one (:func:`nested_overlap` counts them)."""
    rows = check_positive_int("validation_rows", rows)
    if train.split != "train" or train.total_rows is not None:
        raise ValueError("carve the validation rows out of a task's whole training split")
    if rows >= len(train):
        raise ValueError(f"validation_rows must be below the {len(train):,} training rows; got {rows:,}")
    if train.task.nested_rows:
        held, dropped, how = _carve_nested(train, rows)
    else:
        held, dropped, how = set(stratified_indices(train.labels, rows, VALIDATION_SEED)), set(), ""

    def part(name, keep, subset):
        return dataclasses.replace(train, split=name, texts=[x for i, x in enumerate(train.texts) if keep(i)],
                                   labels=[y for i, y in enumerate(train.labels) if keep(i)],
                                   total_rows=len(train), subset=subset)

    left_out = f" and the {len(dropped):,} phrases inside them" if dropped else ""
    return (part("train", lambda i: i not in held and i not in dropped,
                 f"the {rows:,} validation rows{left_out} held out"),
            part("validation", lambda i: i in held, f"held out of train{how}, seed {VALIDATION_SEED}"))


def _words(text) -> tuple[str, ...]:
    return tuple(" ".join(text).split() if isinstance(text, tuple) else text.split())


def _inner_phrases(words: tuple[str, ...]):
    """Every run of consecutive words of a row, the row itself included."""
    return (words[start:end] for start in range(len(words)) for end in range(start + 1, len(words) + 1))


def outermost_rows(texts) -> list[int]:
    """The rows that no other row contains word for word (a phrase's longest enclosing phrase: in SST-2, the
    sentences), each text once (its first row)."""
    words = [_words(text) for text in texts]
    first = {}
    for index, row in enumerate(words):
        first.setdefault(row, index)
    inside = set()
    for row in first:
        inside.update(phrase for phrase in _inner_phrases(row) if phrase != row and phrase in first)
    return [index for row, index in first.items() if row not in inside]


def _carve_nested(train: Split, rows: int) -> tuple[set, set, str]:
    """Validation rows drawn from the outermost rows (label-stratified), and the rows that sit inside them."""
    held, dropped = _nested_carving(tuple(train.texts), tuple(train.labels), rows)
    return set(held), set(dropped), ", whole sentences only"


@functools.lru_cache(maxsize=4)
def _nested_carving(texts: tuple, labels: tuple, rows: int) -> tuple[frozenset, frozenset]:
    """:func:`_carve_nested` on hashable rows, kept: every seed and run of a protocol carves the same rows."""
    candidates = outermost_rows(texts)
    if rows >= len(candidates):
        raise ValueError(f"validation_rows must be below the {len(candidates):,} whole sentences of the training "
                         f"split (its other rows are phrases of them); got {rows:,}")
    held = {candidates[i] for i in stratified_indices([labels[i] for i in candidates], rows, VALIDATION_SEED)}
    inner = {phrase for i in held for phrase in _inner_phrases(_words(texts[i]))}
    dropped = {i for i, text in enumerate(texts) if i not in held and _words(text) in inner}
    return frozenset(held), frozenset(dropped)


def nested_overlap(validation: Split, train: Split) -> int:
    """How many validation rows sit inside a training row or contain one, word for word: what
    :func:`carve_validation` keeps at 0. Computed by plain substring search, apart from the carving."""
    training = "\n".join(f" {' '.join(_words(text))} " for text in train.texts)
    held = [f" {' '.join(_words(text))} " for text in validation.texts]
    joined = "\n".join(held)
    inside = {v for v, text in enumerate(held) if text in training}
    containing = set()
    for text in train.texts:
        phrase = f" {' '.join(_words(text))} "
        if phrase in joined:
            containing.update(v for v, row in enumerate(held) if phrase in row)
    return len(inside | containing)


def stratified_indices(labels, size: int, seed: int = 0) -> list[int]:
    """Exactly ``size`` row indices, in dataset order, with each label's share kept to within one row.

    Each class gets the floor of its exact share ``size·n_k/N``; the rows left over go to the classes with
    the largest remainders (ties to the smaller label), so no class is off by a whole row or more. Rows
    inside a class are drawn with ``random.Random(seed)``: the same seed gives the same subset.
    """
    size = check_positive_int("max_examples", size)
    labels = list(labels)
    if size >= len(labels):
        return list(range(len(labels)))
    by_label = collections.defaultdict(list)
    for index, label in enumerate(labels):
        by_label[label].append(index)
    classes = sorted(by_label)
    exact = {k: size * len(by_label[k]) / len(labels) for k in classes}
    quota = {k: int(exact[k]) for k in classes}
    leftover = size - sum(quota.values())
    for k in sorted(classes, key=lambda k: (-(exact[k] - quota[k]), k))[:leftover]:
        quota[k] += 1
    rng = random.Random(seed)
    return sorted(i for k in classes for i in rng.sample(by_label[k], quota[k]))


# --------------------------------------------------------------------------- tokenising and batching


@dataclass(frozen=True, eq=False)
class TokenizedSplit:
    """A split tokenised once, without padding. The ids of all examples lie end to end in one read-only
    array (example i is ``ids[offsets[i]:offsets[i + 1]]``), which keeps 67k SST-2 rows compact and lets a
    batch be gathered in one step; ``input_ids[i]`` and ``token_type_ids[i]`` give per-example views."""

    split: Split
    ids: np.ndarray
    types: np.ndarray
    offsets: np.ndarray  # len(split) + 1 positions into ids / types
    labels: np.ndarray
    pad_token_id: int
    max_length: int

    def __len__(self) -> int:
        return len(self.labels)

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @functools.cached_property
    def input_ids(self) -> list[np.ndarray]:
        return np.split(self.ids, self.offsets[1:-1])

    @functools.cached_property
    def token_type_ids(self) -> list[np.ndarray]:
        return np.split(self.types, self.offsets[1:-1])

    def describe(self) -> str:
        lengths = self.lengths
        return (
            f"{self.split.task.glue_folder} {self.split.split}: {len(self):,} sequences, tokens per sequence "
            f"(with [CLS]/[SEP]) mean {lengths.mean():.1f}, p95 {np.percentile(lengths, 95):.0f}, "
            f"max {lengths.max()} (cap {self.max_length})"
        )


_TOKENIZED_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_SIZE = 8


def _cache_key(split: Split, tokenizer, max_length: int) -> tuple:
    content = hashlib.sha1()
    for text, label in zip(split.texts, split.labels):
        content.update(repr((text, label)).encode())
    return (
        type(tokenizer).__name__, getattr(tokenizer, "name_or_path", ""), len(tokenizer),
        split.task.name, split.split, split.source, len(split), content.hexdigest(), max_length,
    )


def tokenize(split: Split, tokenizer, max_length: int = 128) -> TokenizedSplit:
    """Tokenise every row once (truncated to ``max_length``, not padded) and keep the result in memory.

    The cache key is the tokenizer (class, name, vocabulary size), the task, split, source and a hash of
    the rows themselves, so a different subset never reuses another's ids. The last few results are kept.
    """
    check_positive_int("max_length", max_length)
    key = _cache_key(split, tokenizer, max_length)
    if key in _TOKENIZED_CACHE:
        _TOKENIZED_CACHE.move_to_end(key)
        return _TOKENIZED_CACHE[key]
    pad = tokenizer.pad_token_id
    if pad is None:
        raise ValueError(f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no pad token")
    if split.task.is_pair:
        first, second = [t[0] for t in split.texts], [t[1] for t in split.texts]
    else:
        first, second = list(split.texts), None
    encoded = tokenizer(
        first, second, truncation=True, max_length=max_length, padding=False,
        return_attention_mask=False, return_token_type_ids=True,
    )

    rows = encoded["input_ids"]
    lengths = np.fromiter((len(row) for row in rows), dtype=np.int64, count=len(rows))
    total = int(lengths.sum())

    def flat(rows):
        array = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int64, count=total)
        array.flags.writeable = False
        return array

    types = encoded.get("token_type_ids") or [[0] * n for n in lengths]
    labels = np.asarray(split.labels, dtype=np.int64)
    labels.flags.writeable = False
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    offsets.flags.writeable = False
    result = TokenizedSplit(split, flat(rows), flat(types), offsets, labels, int(pad), max_length)
    _TOKENIZED_CACHE[key] = result
    while len(_TOKENIZED_CACHE) > _CACHE_SIZE:
        _TOKENIZED_CACHE.popitem(last=False)
    return result


def batch_indices(
    lengths, batch_size: int, order: str = "grouped", seed: int = 0, group_batches: int = 50
) -> list[np.ndarray]:
    """The example indices of each batch, in batch order; every index appears exactly once.

    * ``sequential``: dataset order (for evaluation).
    * ``shuffled``: a seeded random permutation cut into batches.
    * ``grouped``: the same permutation cut into chunks of ``group_batches`` batches; each chunk is sorted
      by length and cut into batches, then all batches are shuffled. Neighbours in a batch have similar
      lengths (little padding), yet which examples share a chunk, and the batch order, stay random.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    check_positive_int("group_batches", group_batches)
    if order not in ORDERS:
        raise ValueError(f"order must be one of {', '.join(ORDERS)}; got {order!r}")
    lengths = np.asarray(lengths)
    count = len(lengths)
    if order == "sequential":
        return [np.arange(start, min(start + batch_size, count)) for start in range(0, count, batch_size)]
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(count)
    if order == "shuffled":
        return [permutation[start:start + batch_size] for start in range(0, count, batch_size)]
    chunk = batch_size * group_batches
    batches = []
    for start in range(0, count, chunk):
        members = permutation[start:start + chunk]
        members = members[np.argsort(lengths[members], kind="stable")]
        batches.extend(members[i:i + batch_size] for i in range(0, len(members), batch_size))
    return [batches[i] for i in rng.permutation(len(batches))]


def collate(tokenized: TokenizedSplit, indices) -> dict[str, torch.Tensor]:
    """One batch padded to its own longest sequence: input_ids, attention_mask, token_type_ids, labels."""
    rows = np.asarray(indices, dtype=np.int64)
    starts, lengths = tokenized.offsets[rows], tokenized.lengths[rows]
    positions = np.arange(lengths.max())
    attention_mask = (positions < lengths[:, None]).astype(np.int64)
    gather = np.where(attention_mask, starts[:, None] + positions, 0)
    input_ids = np.where(attention_mask, tokenized.ids[gather], tokenized.pad_token_id)
    token_type_ids = np.where(attention_mask, tokenized.types[gather], 0)
    return {
        "input_ids": torch.from_numpy(input_ids),
        "attention_mask": torch.from_numpy(attention_mask),
        "token_type_ids": torch.from_numpy(token_type_ids),
        "labels": torch.from_numpy(tokenized.labels[rows]),
    }


def make_batches(
    tokenized: TokenizedSplit, batch_size: int, order: str = "grouped", seed: int = 0, group_batches: int = 50
) -> list[dict[str, torch.Tensor]]:
    """All batches of one epoch (see :func:`batch_indices` for the orders), each padded to its longest row.

    Pass a different ``seed`` per epoch for a different order.
    """
    return [collate(tokenized, rows) for rows in batch_indices(tokenized.lengths, batch_size, order, seed, group_batches)]


def padding_waste(batches) -> float:
    """Padded tokens / real tokens over the batches: 0 means no padding, 1 means as much padding as text."""
    real = sum(int(batch["attention_mask"].sum()) for batch in batches)
    total = sum(batch["attention_mask"].numel() for batch in batches)
    if real == 0:
        raise ValueError("padding_waste needs at least one batch with a real token")
    return (total - real) / real


# --------------------------------------------------------------------------- scoring


def _as_label_array(values, name: str) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.ndim == 2:  # logits or probabilities: the predicted class is the argmax
        array = array.argmax(axis=-1)
    if array.ndim != 1:
        raise ValueError(f"{name} must be a 1-D sequence of class ids (or 2-D logits); got shape {array.shape}")
    return array.astype(np.int64)


def confusion_matrix(predictions, labels, num_labels: int) -> np.ndarray:
    """C[i, j] = number of examples with true label i predicted as j."""
    matrix = np.zeros((num_labels, num_labels), dtype=np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    return matrix


def matthews(matrix: np.ndarray) -> float:
    """Matthews correlation of a K×K confusion matrix (Gorodkin's R_K; the usual MCC when K = 2); 0 if undefined."""
    matrix = matrix.astype(np.float64)
    n = matrix.sum()
    correct = np.trace(matrix)
    true, predicted = matrix.sum(axis=1), matrix.sum(axis=0)
    covariance = correct * n - predicted @ true
    denominator = np.sqrt((n * n - predicted @ predicted) * (n * n - true @ true))
    return float(covariance / denominator) if denominator > 0 else 0.0


def compute_metrics(task: str | TaskSpec, predictions, labels) -> dict[str, float]:
    """The task's metrics as fractions (accuracy 0..1, Matthews -1..1, F1 0..1); the main one is first.

    sst2/rte: accuracy; cola: matthews and accuracy; mrpc: f1 (of label 1, "equivalent") and accuracy.
    ``predictions`` may be class ids or a 2-D array of logits.
    """
    spec = get_task(task)
    predictions = _as_label_array(predictions, "predictions")
    labels = _as_label_array(labels, "labels")
    if len(predictions) != len(labels) or len(labels) == 0:
        raise ValueError(f"need as many predictions as labels, at least one; got {len(predictions)} and {len(labels)}")
    for name, values in (("predictions", predictions), ("labels", labels)):
        if values.min() < 0 or values.max() >= spec.num_labels:
            raise ValueError(f"{name} must be class ids 0..{spec.num_labels - 1} for {spec.name}")
    matrix = confusion_matrix(predictions, labels, spec.num_labels)
    scores = {"accuracy": float(np.trace(matrix) / matrix.sum())}
    if spec.metric == "matthews":
        scores["matthews"] = matthews(matrix)
    elif spec.metric == "f1":
        tp, fp, fn = matrix[1, 1], matrix[0, 1], matrix[1, 0]
        scores["f1"] = float(2 * tp / (2 * tp + fp + fn)) if tp + fp + fn else 0.0
    return {name: scores[name] for name in spec.metric_names}


def chance_spread(n: int) -> float:
    """The standard error of the Matthews correlation of a predictor that ignores its input, on ``n`` rows: 1/√n.

    For two classes n·MCC² of independent predictions and labels is asymptotically χ² with one degree of
    freedom, whatever the class balance, so a single run's MCC within about two of these of 0 cannot be told
    from chance (on CoLA's 1,043 dev sentences: 0.031).
    """
    check_positive_int("n", n)
    return 1.0 / float(np.sqrt(n))


def majority_baseline(split: Split) -> dict[str, float]:
    """The metrics of always predicting the most frequent label (ties: the smaller id) — what a model with
    every adapter removed falls back to."""
    if not len(split):
        raise ValueError("majority_baseline needs a non-empty split")
    counts = collections.Counter(split.labels)
    majority = max(sorted(counts), key=lambda k: counts[k])
    return compute_metrics(split.task, [majority] * len(split), split.labels)
