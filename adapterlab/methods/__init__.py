"""The training methods, each declared once in :mod:`.registry` by its own module.

* :mod:`.adapters` — houlsby, pfeiffer, parallel (labs 1-9);
* :mod:`.freezing` — full fine-tuning, head only, LayerNorm only, top-k layers (labs 6, 10);
* :mod:`.lora` — LoRA (labs 3, 10);
* :mod:`.bitfit` — BitFit (lab 10);
* :mod:`.ia3` — (IA)³, learned rescaling vectors.

Importing this package registers them all, in the order the labs present them.
"""

from . import adapters, freezing, bitfit, lora, ia3  # noqa: F401  (each registers its methods)
from .registry import REGISTRY, Method, SavedSet, apply_method, get, names, register, saveable, unregister

__all__ = ["REGISTRY", "Method", "SavedSet", "apply_method", "get", "names", "register", "saveable", "unregister"]
