"""What ``adapterlab.placement`` held: the BERT surgery, what trains, and the method dispatch."""

from ..methods import apply_method, names
from ..methods.bitfit import settings_of as bitfit_settings  # noqa: F401
from ..methods.registry import set_trainable  # noqa: F401
from ..model.placement import *  # noqa: F401,F403
from ..model.placement import (AdaptedOutput, PlacementError, _parallel_scale, adapted_outputs,  # noqa: F401
                               adapters_train, encoder_layers)
from ..model.trainable import GROUPS, LORA_PARAMETERS, TrainableSummary, parameter_group, trainable_summary  # noqa: F401

METHODS = names()
FREEZE_METHODS = ("full", "head", "layernorm", "top_k", "bitfit")
__all__ = ["apply_method", "set_trainable", "METHODS", "parameter_group", "trainable_summary", "TrainableSummary"]
