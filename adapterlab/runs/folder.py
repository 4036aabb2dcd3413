"""A run folder: what ``adapterlab train --out DIR`` writes and ``adapterlab evaluate --checkpoint DIR`` reads.

A run folder holds ``metrics.json`` (always: the config, the history, the metrics, which backbone and
data, whether it ended complete, interrupted or diverged) and, for the adapter methods, the adapter
set (:mod:`adapterlab.checkpoints`). Methods that train the backbone's own weights (full, top_k,
layernorm, head) write ``metrics.json`` only.

A run folder is written whole or not at all. The files go into a hidden staging folder beside it
(``.NAME.incomplete-…``), which takes the run folder's place only when every file is written, so a
run that stops half-way, or a new run written over an old one (``--overwrite``), never leaves two
runs' files mixed in one folder, and ``evaluate`` never scores an old adapter set beside a new
``metrics.json``. A process killed outright (``kill -9``) can leave a staging folder behind; it is
hidden and safe to delete.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from ..methods import saveable
from ..methods.checkpoints import CONFIG_FILE, read_adapter_config

METRICS_FILE = "metrics.json"
#: How a run ended, as metrics.json's "status" records it.
STATUSES = ("complete", "interrupted", "diverged")


class RunFolderError(ValueError):
    """A run folder cannot be written or does not hold what was asked of it; the message says what to do."""


def _holds(directory: Path) -> str:
    """A short account of a folder's files, for messages: "a houlsby run on sst2", "3 files"."""
    report = read_metrics(directory)
    if report is not None:
        return f"a {describe_run(report)}"
    names = sorted(p.name for p in directory.iterdir())
    shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    return f"{len(names)} file{'s' if len(names) != 1 else ''} ({shown})"


def prepare_run_folder(out, overwrite: bool = False) -> Path:
    """Check ``out`` before anything is loaded or trained, and make the staging folder the run is
    written into; return the staging folder. Raises :class:`RunFolderError` if ``out`` is a file, is
    not empty (unless ``overwrite``), contains the current folder, or cannot be written."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {out} exists and is not a folder; choose a folder for the run")
    if Path.cwd().resolve().is_relative_to(out.resolve()):
        raise RunFolderError(f"--out {out} is the current folder or holds it; choose a folder of its own for the run")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise RunFolderError(f"--out {out} already holds {_holds(out)}; choose a new folder, or pass --overwrite "
                             "to replace it once the new run is complete")
    existing = next(folder for folder in out.absolute().parents if folder.exists())
    if not existing.is_dir():
        raise RunFolderError(f"--out {out}: {existing} is a file, not a folder; choose an --out folder elsewhere")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.incomplete-", dir=out.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; a run folder is an ordinary folder
    except OSError as error:
        reason = error.strerror or str(error)
        raise RunFolderError(f"cannot write the run to {out} ({reason.lower()}); choose an --out folder you can "
                             "write to") from None
    return staging


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def commit_run_folder(staging: Path, out) -> Path:
    """Put the finished staging folder in the place of ``out`` (replacing what was there) and return ``out``.

    Two renames in the same parent folder: the old run moves aside, the new one takes its name, then
    the old one is deleted. At no moment does ``out`` hold files of both runs.
    """
    out = Path(out)
    if out.is_dir():
        aside = Path(tempfile.mkdtemp(prefix=f".{out.name}.replaced-", dir=out.parent))
        os.replace(out, aside / out.name)
        os.replace(staging, out)
        shutil.rmtree(aside, ignore_errors=True)
    else:
        os.replace(staging, out)
    return out


def discard_staging(staging: Path) -> None:
    """Delete a staging folder whose run was not committed (nothing to do once it has been)."""
    shutil.rmtree(staging, ignore_errors=True)


def write_metrics(directory: Path, report: dict) -> Path:
    """Write ``report`` as ``metrics.json`` in ``directory``."""
    path = Path(directory) / METRICS_FILE
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return path


def read_metrics(directory) -> dict | None:
    """The parsed metrics.json of a run folder; None when there is none or it is not a JSON object."""
    try:
        report = json.loads((Path(directory) / METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return report if isinstance(report, dict) else None


def describe_run(report: dict) -> str:
    """"houlsby run on sst2", "full run on cola that diverged at step 4", from a metrics.json report."""
    config = report.get("config") or {}
    text = f"{config.get('method', 'unknown-method')} run on {report.get('task', 'an unknown task')}"
    status = report.get("status")
    if status == "diverged":
        text += f" that diverged at step {report.get('diverged_at_step', '?')}"
    elif status == "interrupted":
        text += " that was stopped early"
    return text


def adapter_set_config(directory) -> dict:
    """The adapter_config.json of the adapter set in a run folder, or a :class:`RunFolderError` that says
    what the folder holds instead (a run of a method without adapters, a diverged run, something else)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise RunFolderError(f"{directory}: no such folder; pass a folder written by `adapterlab train --out`")
    if not (directory / CONFIG_FILE).exists():
        report = read_metrics(directory)
        if report is None:
            raise RunFolderError(f"{directory} holds no adapter set and no {METRICS_FILE}; pass a folder written by "
                                 "`adapterlab train --out`")
        method = (report.get("config") or {}).get("method")
        if report.get("status") == "diverged":
            why = "training diverged, so no adapter set was saved; train again with a lower learning rate"
        elif method not in saveable():
            why = (f"{method} trains the backbone's own weights, so only {METRICS_FILE} was saved (its metrics are "
                   f"there); to evaluate a saved run, train with --method {' / '.join(saveable())}")
        else:
            why = f"its {CONFIG_FILE} is missing, so the adapter set is incomplete; train it again"
        raise RunFolderError(f"{directory} holds a {describe_run(report)}: {why}")
    return read_adapter_config(directory)
