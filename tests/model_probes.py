"""What two model tests compare: a model's outputs on a batch and its architecture (test_lora, test_lora_model)."""

from __future__ import annotations

import torch


def logits(model, batch) -> torch.Tensor:
    """The classifier's logits and, after them, the encoder's last hidden state (of order 1, where the
    logits of a random head are of order 1e-2), flattened into one vector."""
    with torch.no_grad():
        out = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], output_hidden_states=True)
    return torch.cat([out.logits.flatten(), out.hidden_states[-1].flatten()])


def architecture(model) -> tuple:
    """Module names and types, tensor shapes and the parameter count: equal for two models of one architecture."""
    return (
        [(name, type(module).__name__) for name, module in model.named_modules()],
        {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()},
        sum(p.numel() for p in model.parameters()),
    )
