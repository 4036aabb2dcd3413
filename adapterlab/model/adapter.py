"""The bottleneck adapter of Houlsby et al. (2019), and nothing else.

    Adapter(h) = h + W_up f(W_down h + b_down) + b_up

This module knows nothing of BERT: it maps a hidden state of width ``d_model`` to one of the same
width through a bottleneck of width ``bottleneck`` (r). Where it goes inside a transformer is
:mod:`adapterlab.placement`'s business.

Init schemes, and why there are three:

* ``houlsby`` — both matrices drawn from N(0, init_scale²) truncated at ±2·init_scale, biases zero.
  The paper's text says init_scale = 1e-2; the original code (google-research/adapter-bert,
  ``modeling.py``) uses 1e-3. Either way the adapter starts *near* the identity.
* ``zero_up`` — W_up = 0 and W_down Kaiming-uniform, like LoRA's B = 0 / A random. The adapter starts
  as an *exact* identity, ∂L/∂W_down = 0 at step zero and ∂L/∂W_up ≠ 0.
* ``bert`` — N(0, 0.02²) on both matrices (BERT's own init, the default of AdapterHub). Not an identity.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..validation import check_bool, check_choice, check_init_scale, check_positive_int

ACTIVATIONS = ("gelu", "relu", "silu", "swish", "tanh", "identity")
INIT_SCHEMES = ("houlsby", "zero_up", "bert")

#: init_scale of the paper's text (§3.6) and of the original adapter-bert code.
PAPER_INIT_SCALE = 1e-2
ORIGINAL_CODE_INIT_SCALE = 1e-3
BERT_INIT_STD = 0.02


def make_activation(name: str) -> nn.Module:
    """The nonlinearity f by name; ``identity`` gives the linear adapter that collapses to LoRA (lab 3).

    Lab 1 plots each of them.
    """
    modules = {
        "gelu": nn.GELU,
        "relu": nn.ReLU,
        "silu": nn.SiLU,
        "swish": nn.SiLU,
        "tanh": nn.Tanh,
        "identity": nn.Identity,
    }
    return modules[check_choice("activation", name, ACTIVATIONS)]()


def store_transposed(linear: nn.Linear) -> None:
    """Keep the weight's shape and values but lay it out in memory as its transpose (column-major).

    ``F.linear(x, W)`` multiplies by ``W.T``. With this layout ``W.T`` is contiguous, and the CPU matrix
    multiply runs the thin products of a bottleneck much faster that way: on BERT-base (d = 768, r = 64,
    25 tokens, 2 threads) the up-projection takes 21 µs instead of 48 µs, which takes about a point off the
    adapters' inference overhead. The backward pass multiplies by ``W`` itself and pays a little (about 0.4 %
    of a BERT-base training step). Values and results are unchanged; checkpoints store weights contiguous.
    """
    linear.weight = nn.Parameter(linear.weight.detach().t().contiguous().t(), requires_grad=linear.weight.requires_grad)


class BottleneckAdapter(nn.Module):
    """h + up(f(down(h))): a residual two-layer MLP through a bottleneck of width r.

    Parameters: 2·r·d + r + d with biases, 2·r·d without. Lab 1 builds it step by step; labs 2-4 measure
    its init, fold it and count it.
    """

    def __init__(
        self,
        d_model: int,
        bottleneck: int,
        activation: str = "gelu",
        init: str = "houlsby",
        init_scale: float = PAPER_INIT_SCALE,
        bias: bool = True,
    ):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.bottleneck = check_positive_int("bottleneck", bottleneck)
        self.activation_name = activation
        self.act = make_activation(activation)
        self.init = check_choice("init", init, INIT_SCHEMES)
        self.init_scale = check_init_scale(init_scale)
        check_bool("bias", bias)
        self.down = nn.Linear(self.d_model, self.bottleneck, bias=bias)
        self.up = nn.Linear(self.bottleneck, self.d_model, bias=bias)
        for linear in (self.down, self.up):
            store_transposed(linear)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Draw fresh weights with this adapter's init scheme.

        Each weight is drawn into a row-major tensor and copied in, so a seed gives the same adapter
        whatever the memory layout of its weights (see :func:`store_transposed`).
        """
        for linear in (self.down, self.up):
            weight = torch.empty(linear.weight.shape, dtype=linear.weight.dtype, device=linear.weight.device)
            self._draw(weight, is_up=linear is self.up)
            linear.weight.copy_(weight)
            if linear.bias is not None:
                nn.init.zeros_(linear.bias)

    def _draw(self, weight: torch.Tensor, is_up: bool) -> None:
        if self.init == "houlsby" and self.init_scale == 0:
            nn.init.zeros_(weight)  # trunc_normal_ divides by the std; a zero std means zero weights
        elif self.init == "houlsby":
            nn.init.trunc_normal_(weight, std=self.init_scale, a=-2 * self.init_scale, b=2 * self.init_scale)
        elif self.init == "zero_up":
            if is_up:
                nn.init.zeros_(weight)
            else:
                nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        else:  # bert
            nn.init.normal_(weight, std=BERT_INIT_STD)

    def delta(self, h: torch.Tensor) -> torch.Tensor:
        """The correction up(f(down(h))) alone, without the residual (a parallel adapter
        adds this)."""
        if h.ndim == 0 or h.shape[-1] != self.d_model:
            shape = f"width {h.shape[-1]} (shape {tuple(h.shape)})" if h.ndim else "a scalar"
            raise ValueError(
                f"this adapter was built for hidden states of width d_model={self.d_model}, "
                f"but the input has {shape}; pass inputs of shape (..., {self.d_model}) "
                "or build the adapter with that d_model"
            )
        return self.up(self.act(self.down(h)))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.delta(h)

    def plain_delta(self, h: torch.Tensor) -> torch.Tensor:
        """:meth:`delta` for inference, as tensor operations: no module calls, no shape check, the same values.

        At batch 1 a BERT-base forward calls 24 adapters, and the calls of its three modules cost time beside
        products this small (:class:`AdaptedOutput` in inference). No forward hook fires here, so callers use
        it only where none watches the adapter (AdaptedOutput checks).
        """
        return F.linear(self.act.forward(F.linear(h, self.down.weight, self.down.bias)), self.up.weight, self.up.bias)

    @property
    def is_linear(self) -> bool:
        """True when f is the identity: then the adapter is h ↦ (I + W_up W_down) h + c."""
        return isinstance(self.act, nn.Identity)

    def config(self) -> dict:
        """The arguments that rebuild this adapter (for checkpoints and summaries)."""
        return {
            "d_model": self.d_model,
            "bottleneck": self.bottleneck,
            "activation": self.activation_name,
            "init": self.init,
            "init_scale": self.init_scale,
            "bias": self.down.bias is not None,
        }

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, bottleneck={self.bottleneck}, activation={self.activation_name}, init={self.init}"
