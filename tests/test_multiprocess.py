"""The training loop under two processes (torchrun, gloo on CPU): both ranks train, end identical.

``accelerate launch --cpu --num_processes 2`` starts a single process with accelerate 1.15, so the
test launches with torchrun, which accelerate.Accelerator then joins as a 2-process group.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "multiprocess_train.py"


@pytest.mark.skipif(sys.platform == "win32", reason="torchrun's gloo rendezvous is not supported on Windows")
def test_two_processes_train_the_same_parameters(tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or shutil.which("torchrun")
    if torchrun is None:
        pytest.skip("torchrun is not installed")
    env = {k: v for k, v in os.environ.items() if k not in ("ADAPTERLAB_DATA", "WORLD_SIZE", "RANK", "LOCAL_RANK")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    done = subprocess.run([torchrun, "--standalone", "--nproc_per_node", "2", str(SCRIPT), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert all(r["world_size"] == 2 for r in ranks)
    assert ranks[0]["steps"] == ranks[1]["steps"] == [1, 2, 3, 4, 5, 6]
    # each step trains one batch of 16 per process: twice the examples of a single process
    assert ranks[0]["examples"] == ranks[1]["examples"] == 6 * 2 * 16
    assert ranks[0]["parameters_sha256"] == ranks[1]["parameters_sha256"]
    assert ranks[0]["metrics"] == ranks[1]["metrics"]
    assert ranks[0]["parameters_sha256"] != ranks[0]["initial_sha256"]
