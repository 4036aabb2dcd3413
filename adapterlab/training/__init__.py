"""Training: backbones and data in, a trained model and its history out.

* :mod:`.backbones` (and :mod:`.hub`) — bert-base-uncased from the cache or the hub, the offline stand-in, tiny
  test models (lab 0, every training lab);
* :mod:`.data` — GLUE tasks, loading, the validation split, tokenising, length-grouped batches (lab 6);
* :mod:`.precision` — fp32 or bf16 autocast, and the probe that decides "auto" (lab 0);
* :mod:`.config` — :class:`TrainConfig`, built from the declared settings (:mod:`adapterlab.settings`);
* :mod:`.loop` — ``configure_optimizer``, ``train_step`` and ``train`` (lab 6);
* :mod:`.evaluation` — metrics over a split (labs 6-8);
* :mod:`.experiment` — one experiment: load, prepare the method, train (labs 6-10).

The names the old ``adapterlab.training`` module had are importable from here.
"""

from .config import TrainConfig
from .evaluation import evaluate, pick_device
from .experiment import load_experiment, run_experiment
from .loop import (
    DEFAULT_LEARNING_RATES,
    DIVERGENCE_FACTOR,
    DIVERGENCE_STEPS,
    History,
    TrainingDiverged,
    TrainResult,
    check_divergence,
    configure_optimizer,
    train,
    train_step,
    warmup_steps,
)

__all__ = ["TrainConfig", "evaluate", "pick_device", "load_experiment", "run_experiment", "DEFAULT_LEARNING_RATES",
           "DIVERGENCE_FACTOR", "DIVERGENCE_STEPS", "History", "TrainingDiverged", "TrainResult", "check_divergence",
           "configure_optimizer", "train", "train_step", "warmup_steps"]
