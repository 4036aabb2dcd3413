"""What ``adapterlab.lora`` held: the LoRA layer and folding a linear adapter into a weight."""

from ..model.fold import *  # noqa: F401,F403
from ..model.lora import LoRALinear  # noqa: F401
