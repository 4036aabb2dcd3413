"""Train houlsby adapters on the tiny model under several processes; write what each process saw.

    torchrun --standalone --nproc_per_node 2 tests/multiprocess_train.py OUT_DIR

Each process writes OUT_DIR/rank<R>.json: its rank, the world size, the steps and the examples trained
on (over all processes), the final eval metrics and SHA-256 digests of its trainable parameters before
and after training.
"""

import hashlib
import json
import sys
from pathlib import Path

import torch
from accelerate import PartialState

from adapterlab.backbones import TINY, load_backbone
from adapterlab.data import load_split, tokenize
from adapterlab.placement import apply_method
from adapterlab.training import TrainConfig, train


def trainable_sha256(model) -> str:
    digest = hashlib.sha256()
    for name, parameter in sorted(model.named_parameters()):
        if parameter.requires_grad:
            digest.update(name.encode() + parameter.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def main(out: Path) -> None:
    model, tokenizer, _ = load_backbone(TINY, seed=0)
    torch.manual_seed(0)
    apply_method(model, "houlsby", bottleneck=8)
    initial = trainable_sha256(model)
    # 192 rows = 12 full batches of 16, so every step trains exactly 16 rows per process
    train_data = tokenize(load_split("sst2", "train", source="toy", max_examples=192), tokenizer)
    eval_data = tokenize(load_split("sst2", "dev", source="toy"), tokenizer)
    config = TrainConfig(bottleneck=8, max_steps=6, batch_size=16, learning_rate=1e-2, eval_every=3, progress=False)
    result = train(model, train_data, eval_data, config)
    state = PartialState()
    report = {"rank": state.process_index, "world_size": state.num_processes, "examples": result.history.examples,
              "steps": result.history.steps, "metrics": result.metrics,
              "initial_sha256": initial, "parameters_sha256": trainable_sha256(result.model)}
    (out / f"rank{state.process_index}.json").write_text(json.dumps(report))
    state.destroy_process_group()  # left open, gloo's threads may abort the process at exit


if __name__ == "__main__":
    main(Path(sys.argv[1]))
