"""bfloat16 training where this machine computes it fast: a short probe decides, once per machine and backbone.

Many laptop CPUs multiply bfloat16 matrices natively (x86 AVX512-BF16 and AMX, ARM BF16). Measured on the
2-core build machine (AVX512-BF16), one Houlsby r = 64 training step at batch 32, 24 tokens: BERT-base shape
1.80 s in fp32 against 1.03 s in bf16 (1.75x), the stand-in 0.289 s against 0.197 s (1.47x). On a CPU without
native bf16 the same autocast is usually *slower*, so bf16 cannot simply be switched on everywhere.

What "bf16" means in the labs (6-9) and the command line: the forward pass of training runs under
``torch.autocast(dtype=torch.bfloat16)``; the weights, their gradients and AdamW's state stay float32 (master
weights), so a small update is never rounded away. **Evaluation always runs in float32**: the dev metric of
a bf16 run is measured exactly as an fp32 run's is, so the two stay comparable, and evaluation is a small
share of a run's time.

The three choices of ``TrainConfig.precision``:

* ``"fp32"`` and ``"bf16"`` are used as asked;
* ``"auto"`` runs :func:`probe` once per machine: a few forward/backward steps of the loaded backbone (with
  Houlsby adapters, r = 64) in both precisions, and picks bf16 only where it is at least
  :data:`SPEEDUP_NEEDED` times faster. The result is cached in a small JSON file (:func:`cache_file`) keyed by
  the backbone, the device, the processor model, the torch version and the thread count, so the probe runs
  again only when one of those changes. ``$ADAPTERLAB_PRECISION`` (fp32 or bf16) makes "auto" mean that
  precision without a probe: the test suite sets fp32 so that its numbers do not depend on the machine.

Which precision each entry point uses, and why:

* ``TrainConfig`` defaults to ``"auto"``: a student's own training runs (lab cells, ``adapterlab train``) get
  the speed where the CPU has it, and the line under the backbone line says which precision ran.
* Stored runs are keyed by the *resolved* precision (:func:`adapterlab.runstore.run_key`): a bf16 run never
  stands in for an fp32 one. The reference runs in ``data/reference_runs`` are fp32, so whatever reads them
  asks for fp32: the training panel starts at fp32 (its precision menu offers auto and bf16 for speed),
  ``adapterlab sweep`` defaults to ``--precision fp32`` (shards on different machines could otherwise resolve
  "auto" differently and split one grid in two), and a lab reading reference runs with
  :func:`adapterlab.runstore.stored_runs` passes ``precision="fp32"``. A look-up in one precision that finds
  the run stored only in the other says so (a warning), instead of missing it silently.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

#: The values ``TrainConfig.precision`` takes; :data:`RESOLVED` are those a run really trains in.
PRECISIONS = ("auto", "fp32", "bf16")
RESOLVED = ("fp32", "bf16")
#: "auto" picks bf16 only when its training step is at least this many times faster than fp32's: a smaller
#: gain is within the probe's noise and not worth numbers that differ from the fp32 reference runs.
SPEEDUP_NEEDED = 1.2
#: The probe's batch (the shape of an SST-2 training batch), its untimed and timed steps per precision.
PROBE_BATCH, PROBE_TOKENS, PROBE_WARMUP, PROBE_STEPS = 32, 24, 1, 3
CACHE_ENV = "ADAPTERLAB_CACHE"
PRECISION_ENV = "ADAPTERLAB_PRECISION"
CACHE_NAME = "precision_probes.json"


@dataclass(frozen=True)
class Choice:
    """The precision a run trains in (``precision``: fp32 or bf16), what was asked (``requested``) and, for
    "auto", the probe's speed-up of bf16 over fp32 on this machine."""

    precision: str
    requested: str
    speedup: float | None = None

    def describe(self) -> str:
        """One line to print under the backbone line."""
        if self.requested != "auto":
            return f"Precision: {self.precision} (as asked; evaluation in fp32)"
        if self.speedup is None:
            return f"Precision: {self.precision} (auto, set by ${PRECISION_ENV}; evaluation in fp32)"
        rule = "at least" if self.precision == "bf16" else "less than"
        return (f"Precision: {self.precision} (auto: bf16 trains {self.speedup:.2f}x as fast as fp32 here, {rule} "
                f"{SPEEDUP_NEEDED}x; evaluation in fp32)")


def check_precision(value) -> str:
    """``value`` if it is one of :data:`PRECISIONS`, else a one-line error saying what to pass."""
    if value not in PRECISIONS:
        raise ValueError(f"precision must be 'auto', 'fp32' or 'bf16'; got {value!r}")
    return value


def autocast(precision: str, device: torch.device):
    """The context a training forward pass runs in: bf16 autocast, or nothing for fp32."""
    return torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


# ------------------------------------------------------------------------------------------ the probe


def probe_batch(model, device: torch.device) -> dict:
    """A random batch of :data:`PROBE_BATCH` x :data:`PROBE_TOKENS` tokens with labels (seeded)."""
    generator = torch.Generator().manual_seed(0)
    vocab, labels = model.config.vocab_size, model.config.num_labels
    low = min(1000, vocab // 2)  # clear of the special tokens in a real vocabulary
    input_ids = torch.randint(low, vocab, (PROBE_BATCH, PROBE_TOKENS), generator=generator)
    return {"input_ids": input_ids.to(device), "attention_mask": torch.ones_like(input_ids).to(device),
            "labels": torch.randint(0, labels, (PROBE_BATCH,), generator=generator).to(device)}


def time_step(model, batch: dict, precision: str, device: torch.device) -> float:
    """Seconds of one training forward and backward pass in ``precision`` (gradients cleared after)."""
    began = time.perf_counter()
    with autocast(precision, device):
        loss = model(**batch).loss
    loss.backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - began
    model.zero_grad(set_to_none=True)
    return seconds


def probe(model, device: torch.device | None = None, timer=time_step) -> float:
    """bf16's speed-up over fp32 for training steps of ``model`` (a copy, given Houlsby adapters with r = 64
    unless it is already prepared for a method): the median fp32 step time over the median bf16 step time,
    the two precisions taking turns so that a change in the machine's load hits both; 0 where bf16 autocast
    fails on this device. ``timer(model, batch, precision, device)`` times one step; the model, its
    gradients and the random number generators are left as they were."""
    from ..model.placement import add_adapters

    device = torch.device("cpu") if device is None else device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        trial = copy.deepcopy(model)
        if all(parameter.requires_grad for parameter in trial.parameters()):  # not yet prepared for a method
            add_adapters(trial, "houlsby", bottleneck=64)
        trial.to(device).train()
        batch = probe_batch(trial, device)
        times = {precision: [] for precision in RESOLVED}
        for step in range(PROBE_WARMUP + PROBE_STEPS):
            for precision in RESOLVED:
                try:
                    seconds = timer(trial, batch, precision, device)
                except RuntimeError as error:
                    if precision == "fp32":
                        raise
                    print(f"adapterlab: bf16 autocast failed on {device.type} ({error}); training in fp32",
                          file=sys.stderr)
                    return 0.0
                if step >= PROBE_WARMUP:
                    times[precision].append(seconds)
    return statistics.median(times["fp32"]) / statistics.median(times["bf16"])


# ------------------------------------------------------------------------------------------ the cache


def cache_file() -> Path:
    """Where probe results are kept: ``$ADAPTERLAB_CACHE``, else the user's cache folder (``~/.cache``,
    ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows), in ``adapterlab/``."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser() / CACHE_NAME
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "adapterlab" / CACHE_NAME


def processor_name(device: torch.device) -> str:
    """The processor model the speed depends on: the GPU's name, or the CPU's model name."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_key(backbone: str, device: torch.device) -> dict:
    """What a probe's result depends on: backbone, device, processor model, torch version, thread count."""
    return {"backbone": backbone, "device": device.type, "processor": processor_name(device),
            "torch": torch.__version__, "threads": torch.get_num_threads()}


def _read_cache(path: Path) -> list[dict]:
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    return entries if isinstance(entries, list) else []


def cached_speedup(key: dict) -> float | None:
    """The speed-up measured for this machine key, or None when it has not been probed."""
    for entry in _read_cache(cache_file()):
        if isinstance(entry, dict) and entry.get("key") == key and isinstance(entry.get("speedup"), (int, float)):
            return float(entry["speedup"])
    return None


def _store_speedup(key: dict, speedup: float) -> None:
    """Add a probe's result to the cache (a temporary file renamed into place); a cache that cannot be
    written only means the probe runs again next time."""
    path = cache_file()
    entries = [e for e in _read_cache(path) if not (isinstance(e, dict) and e.get("key") == key)]
    entries.append({"key": key, "speedup": speedup,
                    "measured": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        temporary.write_text(json.dumps(entries, indent=1) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as error:
        print(f"adapterlab: could not cache the precision probe in {path} ({error}); it will run again",
              file=sys.stderr)


# ------------------------------------------------------------------------------------------ deciding


def resolve(precision: str, backbone: str, *, model=None, load=None, device: torch.device | None = None,
            timer=time_step) -> Choice:
    """The precision a run with ``precision`` trains in on this machine (see the module docstring).

    For "auto", ``$ADAPTERLAB_PRECISION`` decides when it is set, else the cached probe of ``backbone``;
    when there is none, :func:`probe` measures ``model``, or the model ``load()`` returns (the backbone is
    loaded only then), and caches the result.
    ``timer`` times one step (tests pass a fake one). Labs 6-9 train through it (``run_experiment``).
    """
    check_precision(precision)
    if precision != "auto":
        return Choice(precision, precision)
    pinned = os.environ.get(PRECISION_ENV)
    if pinned:
        if pinned not in RESOLVED:
            raise ValueError(f"${PRECISION_ENV} must be fp32 or bf16; got {pinned!r}: fix or unset it")
        return Choice(pinned, "auto")
    device = torch.device("cpu") if device is None else torch.device(device)
    key = machine_key(backbone, device)
    speedup = cached_speedup(key)
    if speedup is None:
        if model is None and load is None:
            raise ValueError("precision 'auto' needs the model to probe (model= or load=), or pass 'fp32' or 'bf16'")
        speedup = probe(model if model is not None else load(), device, timer)
        _store_speedup(key, speedup)
    return Choice("bf16" if speedup >= SPEEDUP_NEEDED else "fp32", "auto", speedup)
