"""Evaluation: the task's metrics of a model on a tokenised split, apart from any training loop.

Training evaluates as it goes (lab 6), the span ablation of lab 8 evaluates a trained model with some
adapters switched off, and ``adapterlab evaluate`` scores a saved adapter set: all three call the code
here, so a number means the same wherever it was measured. Evaluation runs under
``torch.inference_mode`` on batches sorted by length, each padded only to its own longest row.
"""

from __future__ import annotations

import numpy as np
import torch
from accelerate.utils import gather_object

from ..model.adapter import check_positive_int
from .data import TokenizedSplit, collate, compute_metrics


def pick_device(requested: str | torch.device = "auto") -> torch.device:
    """The device to compute on: ``"auto"`` takes CUDA, then Apple MPS, then the CPU; a name
    (``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``) is checked to exist here. Training (labs 6-9) and
    ``adapterlab evaluate`` pick their device with it."""
    if isinstance(requested, str) and requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got {requested!r}") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {requested!r}: CUDA is not available with this torch ({torch.__version__}); "
                             "use device='auto' or 'cpu'")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"device {requested!r}: there are only {torch.cuda.device_count()} CUDA devices")
    elif device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {requested!r}: Apple MPS is not available here; use device='auto' or 'cpu'")
    elif device.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'auto', 'cpu', 'cuda', 'cuda:N' or 'mps'; got {requested!r}")
    return device


def eval_batches(data: TokenizedSplit, batch_size: int) -> list[dict]:
    """Batches sorted by length: each is padded to its longest row, so almost no padding at all."""
    order = np.argsort(data.lengths, kind="stable")
    return [collate(data, order[i:i + batch_size]) for i in range(0, len(order), batch_size)]


def to_device(batch: dict, device: torch.device) -> dict:
    """The batch's tensors on ``device`` (on the CPU, the batch itself: no copy)."""
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()} if device.type != "cpu" else batch


def evaluate_batches(model, batches, task, device, accelerator=None) -> dict:
    """Loss and metrics over the batches (the model must be in eval mode). Under several processes each
    evaluates its share and the predictions are gathered, so every process gets the same numbers."""
    predictions, labels, loss_sum, count = [], [], torch.zeros((), device=device), 0
    with torch.inference_mode():
        for batch in batches:
            batch = to_device(batch, device)
            output = model(**batch)
            size = len(batch["labels"])
            loss_sum += output.loss * size
            count += size
            predictions.append(output.logits.argmax(-1))
            labels.append(batch["labels"])
    parts = [(torch.cat(predictions).tolist() if predictions else [], torch.cat(labels).tolist() if labels else [],
              float(loss_sum), count)]
    if accelerator is not None and accelerator.num_processes > 1:
        parts = gather_object(parts)
    predicted = [p for part in parts for p in part[0]]
    truth = [t for part in parts for t in part[1]]
    metrics = compute_metrics(task, predicted, truth)
    metrics["loss"] = sum(part[2] for part in parts) / sum(part[3] for part in parts)
    return metrics


def evaluate(model, eval_data: TokenizedSplit, batch_size: int = 128, device="auto") -> dict:
    """The task's metrics (fractions, main metric first) and the mean cross-entropy ``loss`` (lab 8).

    ``device="auto"`` evaluates where the model already is; a device name moves the model there. The
    model's train/eval mode is restored afterwards.
    """
    check_positive_int("batch_size", batch_size)
    if not isinstance(eval_data, TokenizedSplit) or len(eval_data) == 0:
        raise ValueError("eval_data must be a non-empty TokenizedSplit (adapterlab.data.tokenize(split, tokenizer))")
    if device == "auto":
        device = next(model.parameters()).device
    else:
        device = pick_device(device)
        model.to(device)
    was_training = model.training
    model.eval()
    try:
        return evaluate_batches(model, eval_batches(eval_data, batch_size), eval_data.split.task, device)
    finally:
        model.train(was_training)
