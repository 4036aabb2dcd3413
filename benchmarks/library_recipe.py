"""The reference adapter library's default recipe on SST-2: AdapterHub's `adapters`, run by side_by_side.py.

This script runs inside the library's own environment (.venv-library, made by benchmarks/library_env.sh),
never in the project's: `adapters` 1.3 pins transformers ~= 4.57. It imports nothing from adapterlab, so that
the library's side of the comparison is the library alone. The recipe is the one its documentation and
examples show: a BertForSequenceClassification (2 labels) from a local model folder, `adapters.init`, the
default bottleneck adapter (`seq_bn`), `train_adapter`, and `AdapterTrainer` with the library's
TrainingArguments defaults except learning rate 1e-3, batch 32, one epoch, no saving, no reporting, CPU,
over shuffled batches padded to their longest (DataCollatorWithPadding). Accuracy is measured on the dev rows
it is given.

    .venv-library/bin/python benchmarks/library_recipe.py --model DIR --train TSV --dev TSV --threads 2

Both TSV files hold a `sentence<TAB>label` header and one row per line. Everything the trainer prints goes
to stderr; stdout carries one JSON line: accuracy, training seconds, examples/s, rows and versions.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
import time

import adapters
import torch
import transformers
from transformers import (AutoTokenizer, BertForSequenceClassification, DataCollatorWithPadding, TrainingArguments,
                          set_seed)

#: Sentences longer than this many tokens are truncated, as adapterlab truncates them (data.tokenize).
MAX_LENGTH = 128


def read_rows(path: str) -> tuple[list[str], list[int]]:
    """Sentences and labels of a `sentence<TAB>label` file written by side_by_side.py."""
    with open(path, encoding="utf-8") as handle:
        header = handle.readline().rstrip("\n")
        if header != "sentence\tlabel":
            sys.exit(f"error: {path} does not start with a 'sentence<TAB>label' header; write it with side_by_side.py")
        texts, labels = [], []
        for line in handle:
            text, label = line.rstrip("\n").rsplit("\t", 1)
            texts.append(text)
            labels.append(int(label))
    return texts, labels


def encode(tokenizer, texts: list[str], labels: list[int]) -> list[dict]:
    """One unpadded example per row: the collator pads each batch to its longest."""
    encoded = tokenizer(texts, truncation=True, max_length=MAX_LENGTH)
    return [{**{key: values[i] for key, values in encoded.items()}, "labels": label} for i, label in enumerate(labels)]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="a local BERT folder (config.json, model.safetensors, tokenizer)")
    p.add_argument("--train", required=True, help="training rows, sentence<TAB>label")
    p.add_argument("--dev", required=True, help="dev rows, sentence<TAB>label")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    args = p.parse_args(argv)
    if args.threads < 1:
        sys.exit(f"error: --threads must be >= 1; got {args.threads}")
    torch.set_num_threads(args.threads)

    with tempfile.TemporaryDirectory() as scratch, contextlib.redirect_stdout(sys.stderr):
        training_args = TrainingArguments(output_dir=scratch, learning_rate=1e-3, per_device_train_batch_size=32,
                                          num_train_epochs=1, save_strategy="no", report_to="none", use_cpu=True)
        set_seed(training_args.seed)  # before the model: the new classification head is drawn at load time
        tokenizer = AutoTokenizer.from_pretrained(args.model, local_files_only=True)
        model = BertForSequenceClassification.from_pretrained(args.model, num_labels=2, local_files_only=True)
        adapters.init(model)
        model.add_adapter("sst2", config="seq_bn")
        model.train_adapter("sst2")
        train_rows, dev_rows = read_rows(args.train), read_rows(args.dev)
        trainer = adapters.AdapterTrainer(model=model, args=training_args, train_dataset=encode(tokenizer, *train_rows),
                                          data_collator=DataCollatorWithPadding(tokenizer),
                                          processing_class=tokenizer)
        started = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - started
        predictions = trainer.predict(encode(tokenizer, *dev_rows)).predictions.argmax(-1)
    accuracy = float((predictions == dev_rows[1]).mean())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(json.dumps({
        "accuracy": accuracy, "train_seconds": train_seconds,
        "examples_per_second": len(train_rows[1]) / train_seconds, "train_rows": len(train_rows[1]),
        "dev_rows": len(dev_rows[1]), "trained_params": trained, "torch_threads": torch.get_num_threads(),
        "omp_num_threads": os.environ.get("OMP_NUM_THREADS"),
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "adapters": adapters.__version__},
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
