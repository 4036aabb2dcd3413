"""Find the lab notebooks that the instructor commands (slides, student copies) work on.

A lab is named the way people say it: its number (`06`), its file stem (`06_train_sst2`),
its file name, or a path to any notebook.
"""

from __future__ import annotations

from pathlib import Path

from ...paths import LABS_DIR  # read when a function is called, so that a test can point it elsewhere


class LabNotFoundError(ValueError):
    """A lab name that matches no notebook, or more than one."""


def all_labs(labs_dir: Path | str | None = None) -> list[Path]:
    """Every notebook in `labs_dir` (default: the repository's labs/), in teaching order (names start with the lab number)."""
    labs_dir = Path(LABS_DIR if labs_dir is None else labs_dir)
    if not labs_dir.is_dir():
        raise LabNotFoundError(f"labs folder {labs_dir} does not exist: run this from a clone of the repository")
    return sorted(labs_dir.glob("[0-9]*.ipynb"))


def find_labs(names: list[str] | None = None, labs_dir: Path | str | None = None) -> list[Path]:
    """The notebooks for `names` (all labs when None or empty), each found exactly once."""
    labs = all_labs(labs_dir)
    if not names:
        if not labs:
            raise LabNotFoundError(f"no lab notebooks (NN_name.ipynb) in {labs_dir or LABS_DIR}")
        return labs
    return [_find_one(name, labs) for name in names]


def _find_one(name: str, labs: list[Path]) -> Path:
    path = Path(name)
    if path.suffix == ".ipynb" and path.is_file():
        return path
    stem = path.name.removesuffix(".ipynb")
    number = stem.zfill(2) if stem.isdigit() else stem  # "8" is lab 08
    matches = [lab for lab in labs if lab.stem == stem or lab.stem.split("_", 1)[0] == number]
    if len(matches) == 1:
        return matches[0]
    known = ", ".join(lab.stem for lab in labs) or "none"
    if not matches:
        raise LabNotFoundError(f"lab {name!r} not found; give a lab number, a lab name or a notebook path (labs: {known})")
    raise LabNotFoundError(f"lab {name!r} matches several notebooks ({', '.join(m.name for m in matches)}): give the full name")
