"""TrainConfig: everything that decides a training run, built from the settings declared once.

The general settings are declared below; each method's own (the bottleneck, LoRA's rank, ...) in its
module under :mod:`adapterlab.methods`. Every setting becomes a field of :class:`TrainConfig` with its
default, its check and its help, and the same declaration gives the command-line flag
(:func:`add_setting_flags`) and the printed command line of a run (:func:`command_line`).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .. import methods
from ..settings import Setting
from ..validation import check_number, check_positive_int, check_seed
from .data import ORDERS
from .precision import check_precision


def _positive(name, value):
    return check_number(name, value, 0, low_inclusive=False)


def _non_negative(name, value):
    return check_number(name, value, 0, low_inclusive=True)


def _seed(name, value):
    return check_seed(name, value)


def _device(name, value):
    if not isinstance(value, (str, torch.device)):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got {value!r}")
    return value


#: The settings every method reads. ``learning_rate`` None means the method's default rate (its key holds
#: ``peak_learning_rate`` instead); ``max_steps``, when set, overrides ``epochs``; ``eval_every`` None
#: evaluates only at the end; ``max_grad_norm`` None turns clipping off; ``validation_rows`` N carves N rows
#: out of the training rows (fixed by the seed, disjoint from the rows that train) and selects the step to
#: keep on them, so that the dev score it reports was never used to choose.
GENERAL = (
    Setting("method", "houlsby", "the training method", str, choices=methods.names),
    Setting("learning_rate", None, "peak learning rate (default: the method's own)", float, check=_positive,
            optional=True, flag="--lr", aliases=("--learning-rate",), in_key=False),
    Setting("epochs", 1.0, "passes over the training rows", float, check=_positive),
    Setting("max_steps", None, "training steps (overrides --epochs)", int, check=check_positive_int, optional=True,
            flag="--steps", aliases=("--max-steps",)),
    Setting("batch_size", 32, "training batch size", int, check=check_positive_int),
    Setting("eval_batch_size", 128, "evaluation batch size", int, check=check_positive_int),
    Setting("warmup_ratio", 0.1, "share of the steps over which the rate rises linearly from 0", float,
            check=lambda name, value: check_number(name, value, 0, low_inclusive=True, high=1, high_inclusive=False)),
    Setting("weight_decay", 0.01, "AdamW weight decay (none on biases and LayerNorms)", float, check=_non_negative),
    Setting("max_grad_norm", 1.0, "gradient clipping norm (none: no clipping)", float, check=_positive, optional=True),
    Setting("eval_every", None, "evaluate every N steps and at the end", int, check=check_positive_int, optional=True,
            metavar="N"),
    Setting("validation_rows", None, "carve N rows out of the training rows and select the step on them; "
            "dev is then only reported", int, check=check_positive_int, optional=True, metavar="N",
            key_when_default=False),
    Setting("order", "grouped", "batch order: grouped (similar lengths together) or random", str, choices=ORDERS),
    Setting("precision", "auto", "fp32, bf16 autocast, or auto (bf16 where a cached probe finds it at least 1.2x "
            "faster here); evaluation runs in fp32", str, check=lambda name, value: check_precision(value), in_key=False),
    Setting("seed", 0, "seed of everything random: init, dropout, batch order, subsets", int, check=_seed),
    Setting("device", "auto", "auto, cpu, cuda, cuda:N or mps", str, check=_device, in_key=False),
    Setting("progress", True, "show a progress bar", bool, in_key=False),
)


def settings() -> dict[str, Setting]:
    """Every setting by name: the general ones, then the methods'."""
    return {setting.name: setting for setting in (*GENERAL, *methods.registry.method_settings())}


class _TrainConfig:
    """Everything that decides a training run. Every field is checked (``validate``) when the config is made
    and again when training starts, so a widget that changes a field cannot slip a bad value in. The
    fields, their defaults and their meaning are the declared settings (:func:`settings`). ``device`` is
    ignored under a multi-process launch; the config of a finished run (``TrainResult.config``) holds the
    precision it trained in.
    """

    def __post_init__(self):
        self.validate()

    def validate(self):
        for name, setting in settings().items():
            value = getattr(self, name)
            if setting.kind is bool or setting.check is not None or setting.allowed() is not None:
                setting.validate(value)
            elif setting.kind in (int, float) and not (value is None and setting.optional):
                check_number(name, value, -math.inf, low_inclusive=False)
        return self

    @property
    def peak_learning_rate(self) -> float:
        """The learning rate after warmup: ``learning_rate``, or the method's default."""
        return self.learning_rate if self.learning_rate is not None else methods.get(self.method).learning_rate

    def method_kwargs(self) -> dict:
        """The settings of :func:`adapterlab.methods.apply_method` this config decides (every method's)."""
        return {setting.name: getattr(self, setting.name) for setting in methods.registry.method_settings()}

    def as_dict(self) -> dict:
        return dict(dataclasses.asdict(self), device=str(self.device), peak_learning_rate=self.peak_learning_rate)


TrainConfig = dataclasses.make_dataclass(
    "TrainConfig", [(s.name, object, dataclasses.field(default=s.default, metadata={"setting": s}))
                    for s in settings().values()],
    bases=(_TrainConfig,), namespace={"__module__": __name__, "__doc__": _TrainConfig.__doc__})


def add_setting_flags(parser, names=None, defaults: dict | None = None) -> None:
    """Add a flag for every setting (or the ``names`` given) to an argparse parser; ``defaults`` replaces
    a declared default for this command only."""
    defaults = defaults or {}
    for name, setting in settings().items():
        if (names is None and name not in ("device",)) or (names is not None and name in names):
            if name in defaults:
                setting.add_to(parser, defaults[name])
            else:
                setting.add_to(parser)


def config_from_args(args, **fixed) -> "TrainConfig":
    """The TrainConfig that parsed arguments (from :func:`add_setting_flags`) describe, ``fixed`` on top."""
    values = {name: getattr(args, name) for name in settings() if hasattr(args, name)}
    return TrainConfig(**{**values, **fixed})


def command_line(config, skip=("seed", "progress", "device"), defaults: dict | None = None) -> list[str]:
    """The flags that set ``config``'s settings where they differ from the command's defaults (the declared
    ones, ``defaults`` replacing some), leaving out the settings its method does not read."""
    reads = set(methods.get(config.method).settings)
    method_settings = {s.name for s in methods.registry.method_settings()}
    defaults = defaults or {}
    words = []
    for name, setting in settings().items():
        if name in skip or (name in method_settings and name not in reads):
            continue
        value = getattr(config, name)
        if name in defaults:
            if value != defaults[name]:
                words += [setting.flags[0], str(value)]
        else:
            words += setting.command_line(value)
    return words
