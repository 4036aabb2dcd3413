"""The one error every data reader raises: the file, the line where it is known, and what to do."""

from __future__ import annotations

import os


class DataError(ValueError):
    """A data file or folder that cannot be used; the message names the file and, where it helps, the line."""

    def __init__(self, message: str, path: str | os.PathLike | None = None, line: int | None = None):
        self.path = None if path is None else str(path)
        self.line = line
        self.reason = message  # the message without the file and line
        where = "" if path is None else (f"{path}, line {line}: " if line is not None else f"{path}: ")
        super().__init__(where + message)
