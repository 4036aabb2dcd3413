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
hidden and safe to delete. One exception: a kill between the two renames that put a new run in the place
of an old one leaves the new run in its staging folder, the old one in a set-aside folder and a
``.NAME.commit`` note beside them; the next command on that folder finishes the commit and says so (or,
when the staging folder has been deleted, puts the old run back: the only complete copy is never deleted).

Only a run folder is ever replaced: ``--overwrite`` replaces a folder whose ``metrics.json`` is in the
format ``train`` writes and that holds nothing but a run's files; any other folder is refused. While
``train``, ``import`` or ``export`` writes a folder, a lock file beside it (``.NAME.lock``) keeps every other
one out of it. The lock and the files of a staging folder are opened without following links, so a link
planted at their names never has its target overwritten.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from ..methods import saveable
from ..methods.checkpoints import (
    CONFIG_FILE,
    PENDING_TENSORS,
    TEMPORARY,
    TENSORS_FILE,
    read_adapter_config,
    write_durably,
)
from ..validation import json_safe

METRICS_FILE = "metrics.json"
#: How a run ended, as metrics.json's "status" records it.
STATUSES = ("complete", "interrupted", "diverged")
#: The files a run folder holds (the adapter set's only for the methods that save one).
RUN_FILES = (METRICS_FILE, CONFIG_FILE, TENSORS_FILE)
#: Longest file name most file systems allow (bytes).
NAME_MAX = 255


class RunFolderError(ValueError):
    """A run folder cannot be written or does not hold what was asked of it; the message says what to do."""


def _listing(directory: Path) -> str:
    """"3 files (a.ipynb, b.ipynb, c)", for messages."""
    names = sorted(p.name for p in directory.iterdir())
    shown = ", ".join(names[:3]) + (", …" if len(names) > 3 else "")
    return f"{len(names)} file{'s' if len(names) != 1 else ''} ({shown})"


def _holds(directory: Path) -> str:
    """A short account of a folder's files, for messages: "a houlsby run on sst2", "3 files"."""
    report = read_metrics(directory)
    if report is not None:
        return f"a {describe_run(report)}"
    return _listing(directory)


def metrics_problem(report) -> str | None:
    """What keeps a parsed metrics.json from being one ``train`` wrote (None when it is one)."""
    if not isinstance(report, dict):
        return f"it is a JSON {type(report).__name__}, not an object"
    if report.get("status") not in STATUSES:
        return f"its status {report.get('status')!r} is not one of {', '.join(STATUSES)}"
    if not isinstance(report.get("task"), str):
        return "it names no task"
    if not isinstance(report.get("config"), dict) or not isinstance(report["config"].get("method"), str):
        return "its config is not an object naming a method"
    return None


def is_run_folder(directory) -> bool:
    """Whether ``directory`` is recognisably a run folder: a metrics.json in the format ``train`` writes, and
    nothing but a run's files (and what a killed adapter-set save can leave)."""
    directory = Path(directory)
    if not directory.is_dir() or read_metrics(directory) is None:
        return False
    return all(path.name in RUN_FILES or TEMPORARY.fullmatch(path.name) or PENDING_TENSORS.fullmatch(path.name)
               for path in directory.iterdir())


def _real(out) -> Path:
    """Where a run for ``out`` goes: the folder a symbolic link points to (the link stays), else ``out``.
    A link that leads back to itself is refused here, before any other check follows it."""
    out = Path(out)
    if not out.is_symlink():
        return out
    try:
        return Path(os.path.realpath(out, strict=True))
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise RunFolderError(f"{out} is a symbolic link that leads back to itself (a loop); remove the link "
                                 "or choose another folder") from None
    return out.resolve()  # a link to nothing: prepare_run_folder says so


def _place(out) -> Path:
    """The folder a run for ``out`` goes to (:func:`_real`), once it is known to be a place a run can go:
    not the root or the current folder (nor one holding it), and under a folder, not a file."""
    real = _real(out)
    if Path.cwd().resolve().is_relative_to(real.resolve()):
        raise RunFolderError(f"--out {out} is the current folder or holds it; choose a folder of its own for the run")
    existing = next(folder for folder in real.absolute().parents if folder.exists())
    if not existing.is_dir():
        raise RunFolderError(f"--out {out}: {existing} is a file, not a folder; choose an --out folder elsewhere")
    return real


def hidden_name(out, suffix: str) -> str:
    """``.NAME.suffix`` beside ``out``, shortened (its start and a hash of the name) where that would pass the
    file system's limit of 255 bytes, so that any legal --out name has its staging, lock and note files."""
    name = Path(out).name
    hidden = f".{name}.{suffix}"
    if len(hidden.encode()) + 16 <= NAME_MAX:  # room for mkdtemp's random part
        return hidden
    digest = hashlib.sha256(name.encode()).hexdigest()[:16]
    return f".{name.encode()[:120].decode(errors='ignore')}-{digest}.{suffix}"


def prepare_run_folder(out, overwrite: bool = False) -> Path:
    """Check ``out`` before anything is loaded or trained, and make the staging folder the run is
    written into; return the staging folder. Raises :class:`RunFolderError` if ``out`` is a file, is
    not empty (unless it is a run folder and ``overwrite``), contains the current folder, is a link to
    nothing, or cannot be written."""
    given = Path(out)
    out = _place(given)
    if given.is_symlink() and not given.exists():
        raise RunFolderError(f"--out {given} is a symbolic link to {os.readlink(given)}, which does not exist; "
                             "create that folder or choose another --out")
    if out.exists() and not out.is_dir():
        raise RunFolderError(f"--out {given} exists and is not a folder; choose a folder for the run")
    if out.is_dir() and any(out.iterdir()):
        if not is_run_folder(out):
            raise RunFolderError(f"--out {given} already holds {_not_a_run(out)}, so it is not a run folder and is "
                                 "never replaced; choose a new or empty folder for the run")
        if not overwrite:
            raise RunFolderError(f"--out {given} already holds {_holds(out)}; choose a new folder, or pass "
                                 "--overwrite to replace it once the new run is complete")
    if out.is_dir() and not os.access(out, os.W_OK | os.X_OK):
        raise RunFolderError(f"cannot write the run to {given} (the folder is read-only); choose an --out folder "
                             "you can write to")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=hidden_name(out, "incomplete-"), dir=out.parent))
        staging.chmod(0o777 & ~_umask())  # mkdtemp makes it private; a run folder is an ordinary folder
    except OSError as error:
        raise RunFolderError(f"cannot write the run to {given} ({os_error_reason(error)}); choose an --out folder "
                             "you can write to") from None
    return staging


def _not_a_run(directory: Path) -> str:
    """What a non-empty folder that is not a run folder holds, and why it is not one."""
    listing = _listing(directory)
    path = directory / METRICS_FILE
    if not path.exists():
        return f"{listing} and no {METRICS_FILE}"
    report = read_metrics(directory)
    if report is None:
        return f"{listing}; its {METRICS_FILE} is {metrics_state(directory)}"
    others = sorted(p.name for p in directory.iterdir() if p.name not in RUN_FILES)
    return f"a {describe_run(report)} and other files ({', '.join(others[:3])}{', …' if len(others) > 3 else ''})"


#: One plain sentence per errno, for a write that failed.
_OS_REASONS = {
    errno.ENOSPC: "the disk is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "the operation is not permitted",
    errno.ENAMETOOLONG: "a file name is too long",
    errno.ENOENT: "a folder on the way does not exist",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EEXIST: "something is already there",
    errno.EIO: "the disk reported an input/output error",
    errno.EFBIG: "the file is larger than this process may write",
    errno.ENOTEMPTY: "the folder is not empty",
    errno.EXDEV: "the folders are on different file systems",
}


def os_error_reason(error: OSError) -> str:
    """One plain phrase for an OSError: "the disk is full", not "[Errno 28] No space left on device: '...'"."""
    reason = _OS_REASONS.get(error.errno)
    if reason is None:
        reason = (error.strerror or str(error)).lower()
    return reason


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def commit_run_folder(staging: Path, out) -> Path:
    """Put the finished staging folder in the place of ``out`` (replacing what was there) and return ``out``.

    Into a new or empty folder: one rename. Over an old run: a note (``.NAME.commit``) names the staging
    folder, then two renames in the same parent folder (the old run moves aside, the new one takes its
    name), then the old one and the note are deleted. At no moment does ``out`` hold files of both runs,
    and a kill between the renames is finished by the next command (:func:`recover_run_folder`).
    """
    real = _real(out)
    if real.is_dir() and not any(real.iterdir()):
        try:
            os.replace(staging, real)  # a rename onto an empty folder replaces it (POSIX)
            return Path(out)
        except OSError:
            real.rmdir()
    if not real.is_dir():
        os.replace(staging, real)
        return Path(out)
    aside = Path(tempfile.mkdtemp(prefix=hidden_name(real, "replaced-"), dir=real.parent))
    write_durably(real.parent, hidden_name(real, "commit"),
                  json.dumps({"staging": staging.name, "aside": aside.name}).encode())
    _finish_commit(real, staging, aside)
    return Path(out)


def _finish_commit(out: Path, staging: Path, aside: Path) -> None:
    """Put the new run (``staging``) in the place of the old one, or, when the new run is gone (its staging
    folder deleted by hand), put the old run back: the set-aside folder is deleted only once ``out`` holds a run."""
    old = aside / out.name
    if staging.is_dir():
        if out.exists():
            os.replace(out, old)
        os.replace(staging, out)
    elif old.is_dir() and not out.exists():
        os.replace(old, out)
    shutil.rmtree(aside, ignore_errors=True)
    (out.parent / hidden_name(out, "commit")).unlink(missing_ok=True)


def recover_run_folder(out) -> str | None:
    """Finish a commit a killed process cut short between its two renames (its note names the staging
    folder, which holds the new run whole); return a sentence saying so, or None when there was none.
    Call it holding the folder's lock (:func:`claim_run_folder`)."""
    real = _real(out)
    note = real.parent / hidden_name(real, "commit")
    if not note.is_file():
        return _clear_leftovers(real)
    try:
        names = json.loads(note.read_text(encoding="utf-8"))
        staging, aside = (real.parent / names[key] for key in ("staging", "aside"))
    except (OSError, ValueError, TypeError, KeyError, RecursionError):
        note.unlink(missing_ok=True)  # a note cut short: written before the renames, so nothing had moved
        return None
    prefix = hidden_name(real, "")
    if not all(path.name.startswith(prefix) and path.parent == real.parent for path in (staging, aside)):
        note.unlink(missing_ok=True)
        return None
    had_new, had_old = staging.is_dir(), (aside / real.name).is_dir() and not real.exists()
    _finish_commit(real, staging, aside)
    _clear_leftovers(real)
    if had_new:
        return (f"{out} now holds the run a process killed while writing it had finished (it was cut short between "
                "putting the old run aside and the new one in place)")
    if had_old:
        return (f"{out} holds its earlier run again: a process killed while replacing it had put it aside, and the "
                "new run's unfinished folder was gone")
    return None


def recover_unlocked(out) -> str | None:
    """:func:`recover_run_folder` for a command that only reads ``out`` (evaluate): done when no ``train``
    holds the folder's lock (one that does finishes its own commit)."""
    real = _real(out)
    if not (real.parent / hidden_name(real, "commit")).is_file():
        return None
    try:
        with claim_run_folder(out):
            return recover_run_folder(out)
    except RunFolderBusy:
        return None


def _clear_leftovers(out: Path) -> str | None:
    """Delete the staging and set-aside folders of killed writers of ``out`` (no live one is left: the caller
    holds the lock); return a sentence saying so, or None when there were none."""
    pattern = re.compile(re.escape(hidden_name(out, "")) + r"(incomplete|replaced)-[a-z0-9_]{8}")
    found = [path for path in out.parent.iterdir() if pattern.fullmatch(path.name) and path.is_dir()
             and not path.is_symlink()]
    for path in found:
        if (path / out.name).is_dir() and not out.exists():  # an old run set aside whose commit note is gone
            os.replace(path / out.name, out)
        shutil.rmtree(path, ignore_errors=True)
    if not found:
        return None
    return (f"removed {len(found)} unfinished folder{'s' if len(found) != 1 else ''} a stopped or killed run of "
            f"{out} had left ({', '.join(sorted(p.name for p in found))})")


class RunFolderBusy(RunFolderError):
    """Another process is writing the run folder."""


@contextlib.contextmanager
def claim_run_folder(out, wait: bool = False):
    """Hold the lock of the run folder ``out`` (a file ``.NAME.lock`` beside it) while the block runs; raise
    :class:`RunFolderBusy` when another process holds it (unless ``wait``). ``train``, ``import`` and ``export``
    all take it. The lock ends with the process, however it ends, so a kill leaves at most an unlocked file
    that the next command takes."""
    real = _place(out)
    path = real.parent / hidden_name(real, "lock")
    try:
        real.parent.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise RunFolderError(f"cannot write the run to {out} ({os_error_reason(error)}); choose an --out folder "
                             "you can write to") from None
    while True:
        handle = _open_lock(path, out)
        try:
            if not _lock(handle, wait):
                holder = os.pread(handle, 200, 0).decode(errors="replace").strip() if hasattr(os, "pread") else ""
                raise RunFolderBusy(f"--out {out} is being written by another adapterlab train, import or export"
                                    f"{f' ({holder})' if holder else ''}; wait until it ends, or choose another folder")
            if not _same_file(handle, path):  # the last holder removed it after we opened it: take the new one
                os.close(handle)
                continue
        except BaseException:
            with contextlib.suppress(OSError):
                os.close(handle)
            raise
        break
    try:
        os.ftruncate(handle, 0)
        os.write(handle, f"process {os.getpid()}".encode())
        yield path
    finally:
        with contextlib.suppress(OSError):
            path.unlink()  # while still locked: a process waiting on the old file sees it is gone and retries
        os.close(handle)


#: How often a lock file that another process removes between two opens is looked for again.
LOCK_OPEN_TRIES = 100


def _open_lock(path: Path, out) -> int:
    """Open (or create) the lock file without following a link: a link planted at its name would otherwise
    have its target truncated and overwritten by the lock's note."""
    flags = os.O_RDWR | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    for _ in range(LOCK_OPEN_TRIES):
        try:
            handle = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            try:
                handle = os.open(path, flags)
            except FileNotFoundError:  # its holder removed it between the two opens: try again
                continue
            except OSError as error:
                _raise_unless_a_link(error, path, out)
                handle = None
        except OSError as error:
            _raise_unless_a_link(error, path, out)
            handle = None
        if handle is not None:
            status = os.fstat(handle)
            if stat.S_ISREG(status.st_mode) and status.st_nlink == 1:
                return handle
            os.close(handle)
        raise RunFolderError(f"the lock file {path} of --out {out} is a link (symbolic or hard) or not a plain file, "
                             "which is never followed or written; delete it, or choose another folder")
    raise RunFolderError(f"the lock file {path} of --out {out} kept vanishing as it was opened ({LOCK_OPEN_TRIES} "
                         "tries); choose an --out folder on a file system that keeps files")



def _raise_unless_a_link(error: OSError, path: Path, out) -> None:
    """A symbolic link at the lock's name is refused by the caller, with the others that are not a plain file;
    any other failure to open it is the folder's: raise :class:`RunFolderError`."""
    if error.errno != errno.ELOOP:
        raise RunFolderError(f"cannot write the run to {out} ({os_error_reason(error)}); choose an --out folder you "
                             "can write to") from None


def _same_file(handle: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(handle), os.stat(path))
    except OSError:
        return False


def _lock(handle: int, wait: bool) -> bool:
    """Lock an open file exclusively; False when another process holds it (and ``wait`` is False)."""
    try:
        import fcntl
    except ImportError:  # Windows
        import msvcrt

        try:
            msvcrt.locking(handle, msvcrt.LK_LOCK if wait else msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def recover_read(folder, command: str) -> None:
    """Before a command reads ``folder``: finish a commit a killed writer cut short there (:func:`recover_unlocked`),
    and say so on stderr."""
    _say(command, recover_unlocked(folder))


def _say(command: str, sentence: str | None) -> None:
    if sentence:
        print(f"adapterlab {command}: {sentence}", file=sys.stderr)


@contextlib.contextmanager
def writing_run_folder(out, *, overwrite: bool, command: str, reads=None):
    """What ``import`` and ``export`` write ``out`` under, as ``train`` does: its lock held, what a killed
    writer left finished or cleared (said on stderr), ``out`` checked; the block writes into the staging
    folder it is given, which takes the place of ``out`` when the block ends without an error. ``reads`` is the
    folder the command reads, refused when ``out`` is it or holds it (replacing it would destroy the input)."""
    if reads is not None and Path(os.path.realpath(reads)).is_relative_to(_real(out).resolve()):
        raise RunFolderError(f"--out {out} is the folder being read ({reads}) or holds it: writing there would "
                             "replace what is being read; choose another --out")
    with claim_run_folder(out):
        _say(command, recover_run_folder(out))
        staging = prepare_run_folder(out, overwrite=overwrite)
        try:
            yield staging
            commit_run_folder(staging, out)
        finally:
            discard_staging(staging)


def discard_staging(staging: Path) -> None:
    """Delete a staging folder whose run was not committed (nothing to do once it has been)."""
    shutil.rmtree(staging, ignore_errors=True)


def write_metrics(directory: Path, report: dict) -> Path:
    """Write ``report`` as ``metrics.json`` in ``directory``."""
    path = Path(directory) / METRICS_FILE
    write_new(path, json.dumps(json_safe(report), indent=2, allow_nan=False) + "\n")
    return path


def write_new(path: Path, text: str) -> None:
    """Write a new file of a folder being made (a staging folder): never through a link planted at its name,
    never over a file already there."""
    handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o666)
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)


def read_metrics(directory) -> dict | None:
    """The parsed metrics.json of a run folder; None when there is none or it is not one ``train`` wrote
    (:func:`metrics_state` says which)."""
    try:
        report = json.loads((Path(directory) / METRICS_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    return report if metrics_problem(report) is None else None


def metrics_state(directory) -> str:
    """What is wrong with a run folder's metrics.json, for messages: "missing", "not valid JSON (...)",
    "not in the format adapterlab train writes (...)", or "in order"."""
    path = Path(directory) / METRICS_FILE
    if not path.exists():
        return "missing"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except RecursionError:
        return "not valid JSON (nested too deeply)"
    except UnicodeDecodeError:
        return "not text (the file is damaged)"
    except ValueError as error:
        return f"not valid JSON ({error})"
    except OSError as error:
        return f"unreadable ({os_error_reason(error)})"
    problem = metrics_problem(report)
    return "in order" if problem is None else f"not in the format adapterlab train writes ({problem})"


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
            state = metrics_state(directory)
            what = f"no {METRICS_FILE}" if state == "missing" else f"a {METRICS_FILE} that is {state}"
            raise RunFolderError(f"{directory} holds no adapter set and {what}; pass a folder written by "
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
