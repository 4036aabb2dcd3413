#!/usr/bin/env bash
# The reference adapter library (AdapterHub's `adapters`) in its own virtual environment, .venv-library in the
# repository root, for benchmarks/side_by_side.py. It pins transformers ~= 4.57, which the project's .venv cannot
# hold, so the two never share an environment. torch goes first and pinned: a bare `torch` would pull a
# multi-GB CUDA build. transformers' Trainer, which AdapterTrainer extends, needs accelerate, which `adapters`
# does not pull in.
#
#     bash benchmarks/library_env.sh
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv-library && .venv-library/bin/pip install torch==2.13.0 adapters==1.3.0 'accelerate>=0.26'
