"""Where the project's folders are: the one place that knows the package lies one level below the project root.

The project root holds ``labs/``, ``data/`` (toy sets and the reference runs) and ``runs/`` (a student's own
runs); relative settings such as ``ADAPTERLAB_DATA`` and ``ADAPTERLAB_RUNS`` are read against it, so that the
command line (run in the root) and the notebooks (run in ``labs/``) mean the same folder.
"""

from __future__ import annotations

from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent
LABS_DIR = PROJECT_ROOT / "labs"
DATA_DIR = PROJECT_ROOT / "data"
PACKAGE_DIR = Path(__file__).resolve().parent


def project_path(value) -> Path:
    """``value`` as a path, a relative one read against the project root (not the current folder)."""
    path = Path(value).expanduser()
    return path if path.is_absolute() else PROJECT_ROOT / path
