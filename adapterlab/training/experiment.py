"""One experiment: load a backbone and a task's data, prepare the method, train, evaluate (labs 6-10).

The training panel, the run store and the command line all train through :func:`run_experiment`, so a run
made in a notebook and one made by ``adapterlab train`` are the same computation.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch
from accelerate.utils import set_seed

from ..methods import apply_method
from .config import TrainConfig
from . import backbones  # looked up at each call, so that a test can replace load_backbone
from .data import TokenizedSplit, carve_validation, get_task, load_split, take_subset, tokenize
from .evaluation import pick_device
from .loop import TrainingDiverged, TrainResult, train
from .precision import resolve


def run_experiment(task="sst2", config: TrainConfig | None = None, backbone: str = "bert-base-uncased",
                   data_dir=None, max_train: int | None = None, max_eval: int | None = None, callback=None,
                   fallback: bool = True, loader=None) -> TrainResult:
    """Load a backbone and a task's train/dev data, apply ``config.method``, train, evaluate.

    The result says which backbone really ran (``backbone_info``: the offline stand-in when
    bert-base-uncased is not available and ``fallback`` is on) and which data (``data_description``:
    source and row counts, "TOY DATA" when the project's own small sets were used; ``toy_data`` says
    the same as a boolean). A :class:`TrainingDiverged` it raises carries the same three. Subsets of
    ``max_train`` / ``max_eval`` rows are label-stratified and seeded with ``config.seed``. The precision
    (``precision``, a :class:`adapterlab.precision.Choice`) is decided before training and printed under the
    backbone line. ``loader`` replaces :func:`load_experiment` (same arguments): the training panel passes
    one that keeps the backbone and the data loaded between runs.
    """
    config = TrainConfig() if config is None else config
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig; got {type(config).__name__}")
    config.validate()
    spec = get_task(task)
    split_settings = {} if config.validation_rows is None else {"validation_rows": config.validation_rows}
    loaded = (loader or load_experiment)(spec, backbone, data_dir, max_train, max_eval, fallback, config.seed,
                                         **split_settings)
    model, info = loaded.model, loaded.info
    description = {"train": loaded.train_split.describe(), "eval": loaded.eval_split.describe()}
    if loaded.validation_split is not None:
        description["validation"] = loaded.validation_split.describe()
    choice = resolve(config.precision, info.loaded, model=model, device=pick_device(config.device))
    config = replace(config, precision=choice.precision)
    if config.progress:
        print(info.describe(), choice.describe(), *(f"{k}: {v}" for k, v in description.items()), sep="\n")
    set_seed(config.seed)  # the adapters' initial weights
    apply_method(model, config.method, **config.method_kwargs())
    toy_data = loaded.train_split.is_toy or loaded.eval_split.is_toy
    try:
        result = train(model, loaded.train_data, loaded.eval_data, config, callback=callback, backbone=info.loaded,
                       validation_data=loaded.validation_data)
    except TrainingDiverged as error:  # say what ran, so that the partial run can be reported in full
        error.backbone_info, error.data_description, error.toy_data = info, description, toy_data
        error.precision = choice
        raise
    result.backbone_info, result.data_description, result.toy_data = info, description, toy_data
    result.precision = choice  # with the probe's speed-up when it was "auto"
    return result


@dataclass
class Loaded:
    """A backbone and a task's train/dev rows, tokenized: what :func:`run_experiment` trains on."""

    model: torch.nn.Module
    tokenizer: object
    info: object
    train_split: object
    eval_split: object
    train_data: TokenizedSplit
    eval_data: TokenizedSplit
    validation_split: object = None
    validation_data: TokenizedSplit | None = None


def load_splits(task, data_dir, max_train: int | None, max_eval: int | None, seed: int,
                validation_rows: int | None = None):
    """The task's train, dev and (with ``validation_rows``) validation rows: the validation rows are carved
    out of the whole training split first (the same rows for every seed), then the training subset of
    ``max_train`` rows is drawn from the rest with ``seed``."""
    spec = get_task(task)
    if validation_rows is None:
        train_split, validation_split = load_split(spec, "train", data_dir, max_examples=max_train, seed=seed), None
    else:
        rest, validation_split = carve_validation(load_split(spec, "train", data_dir), validation_rows)
        train_split = take_subset(rest, max_train, seed)
    return train_split, load_split(spec, "dev", data_dir, max_examples=max_eval, seed=seed), validation_split


def load_experiment(task, backbone: str, data_dir, max_train: int | None, max_eval: int | None, fallback: bool,
                    seed: int, validation_rows: int | None = None) -> Loaded:
    """Read the task's rows (:func:`load_splits`), load the backbone (its new head seeded), tokenize. The data
    comes first, so a missing data file is reported before a slow model load."""
    spec = get_task(task)
    train_split, eval_split, validation_split = load_splits(spec, data_dir, max_train, max_eval, seed, validation_rows)
    model, tokenizer, info = backbones.load_backbone(backbone, num_labels=spec.num_labels, fallback=fallback, seed=seed)
    return Loaded(model, tokenizer, info, train_split, eval_split, tokenize(train_split, tokenizer),
                  tokenize(eval_split, tokenizer), validation_split,
                  tokenize(validation_split, tokenizer) if validation_split is not None else None)
