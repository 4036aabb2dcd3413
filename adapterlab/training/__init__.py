"""Training: backbones and data in, a trained model and its history out.

* :mod:`.backbones` (and :mod:`.hub`) — bert-base-uncased from the cache or the hub, the offline stand-in, tiny
  test models (lab 0, every training lab);
* :mod:`.data` — GLUE tasks, loading, the validation split, tokenising, length-grouped batches (lab 6);
* :mod:`.precision` — fp32 or bf16 autocast, and the probe that decides "auto" (lab 0);
* :mod:`.loop` — :class:`TrainConfig`, ``configure_optimizer``, ``train_step`` and ``train`` (lab 6);
* :mod:`.evaluation` — metrics over a split (labs 6-8);
* :mod:`.experiment` — one experiment: load, prepare the method, train (labs 6-10).

The names the old ``adapterlab.training`` module had are importable from here.
"""

from .evaluation import evaluate
from .loop import (
    DEFAULT_LEARNING_RATES,
    History,
    TrainConfig,
    TrainingDiverged,
    TrainResult,
    check_divergence,
    train,
    warmup_steps,
)
from .loop import load_experiment, run_experiment

__all__ = ["evaluate", "DEFAULT_LEARNING_RATES", "History", "TrainConfig", "TrainingDiverged", "TrainResult",
           "check_divergence", "train", "warmup_steps", "load_experiment", "run_experiment"]
