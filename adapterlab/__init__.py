"""adapterlab: a teaching lab on bottleneck adapters (Houlsby et al. 2019)."""

from .adapter import ACTIVATIONS, INIT_SCHEMES, BottleneckAdapter
from .counting import bert_counts, compare_counts, count_model
from .lora import LoRALinear, best_linear_fit, fold_adapters, fold_linear_adapter, linear_adapter_matrix
from .placement import (
    METHODS,
    PLACEMENTS,
    PlacementError,
    add_adapters,
    adapter_config,
    apply_method,
    enabled_layers,
    remove_adapters,
    set_adapters_enabled,
    set_trainable,
    trainable_summary,
)

__version__ = "0.1.0"

__all__ = [
    "ACTIVATIONS", "INIT_SCHEMES", "BottleneckAdapter",
    "bert_counts", "compare_counts", "count_model",
    "LoRALinear", "best_linear_fit", "fold_adapters", "fold_linear_adapter", "linear_adapter_matrix",
    "METHODS", "PLACEMENTS", "PlacementError", "add_adapters", "adapter_config", "apply_method", "enabled_layers",
    "remove_adapters", "set_adapters_enabled", "set_trainable", "trainable_summary",
]
