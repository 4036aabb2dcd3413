"""The user's own CSV, TSV and JSON files, read in memory from the very bytes the task's fingerprint is made of.

Why not ``datasets``' builders: they copy every file into an Arrow cache in the home folder (kept for ever; a
read-only home then stops training with a message that blames the user's file), and that cache is keyed on the
path and the modification time, so a file edited in place under the same time is read stale. These files are
small, and the standard library reads them exactly; every problem is one line naming the file and the row.

* CSV: the standard dialect (a field holding a comma, a quote or a line break is written in double quotes).
* TSV: GLUE's own layout: one row per line, fields split at tabs, no quote processing, so a bare ``"`` in a
  sentence is text (MRPC's and SST-2's files hold many).
* JSON: one object per line (JSON lines), or one array of objects.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from .data_errors import DataError

FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json"}


def check_file(path: Path) -> None:
    """A regular file with a suffix this module reads; anything else is named for what it is (a folder, a
    named pipe that would block the read, a device that would never end)."""
    if not path.exists():
        raise DataError("missing file", path)
    if not path.is_file():
        kind = ("a folder" if path.is_dir() else "a named pipe (FIFO)" if path.is_fifo()
                else "a device" if path.is_char_device() or path.is_block_device() else "not a regular file")
        raise DataError(f"this is {kind}, not a data file; give a .csv, .tsv or .json file", path)
    if path.suffix.lower() not in FORMATS:
        raise DataError(f"read CSV, TSV and JSON files ({', '.join(FORMATS)}); got {path.suffix or 'no suffix'}",
                        path)


def read_rows(path: Path, data: bytes, text_columns: tuple[str, ...], label_column: str) -> tuple[list, list[str]]:
    """Texts (a sentence, or a pair as a tuple) and label values (as text) of one file's bytes.

    Each text cell must be non-empty text and each label a class name, a whole number or true/false: a number,
    list or object in a text cell, or an empty label, is an error naming its row, never a class of its own.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise DataError(f"not UTF-8 text (byte {data[error.start]:#04x} in {data[error.start:error.end + 8]!r}); "
                        "save it as UTF-8", path, line) from None
    if not text.strip():
        raise DataError("empty file; expected a header row and labelled rows", path)
    kind = FORMATS[path.suffix.lower()]
    columns, rows = _json_rows(path, text) if kind == "json" else _table_rows(path, text, kind)
    missing = [name for name in (*text_columns, label_column) if name not in columns]
    if missing:
        raise DataError(f"no column {', '.join(map(repr, missing))}; its columns are "
                        f"{', '.join(map(repr, columns))}", path)
    if not rows:
        raise DataError("no data rows after the header", path)
    texts, labels = [], []
    for number, row in enumerate(rows, start=1):
        texts.append(tuple(_text(path, number, name, row.get(name)) for name in text_columns))
        labels.append(_label(path, number, label_column, row.get(label_column)))
    return [pair if len(pair) == 2 else pair[0] for pair in texts], labels


def _table_rows(path: Path, text: str, kind: str) -> tuple[list[str], list[dict]]:
    if kind == "tsv":  # GLUE's layout: no quoting, so a bare '"' stays in the sentence
        table = [line.rstrip("\r").split("\t") for line in text.split("\n")]
    else:
        header = text.split("\n", 1)[0]
        if "," not in header and (";" in header or "\t" in header):  # before a quote error deep in the rows
            separator = "tabs" if "\t" in header else ";"
            raise DataError(f"its header {header.strip()!r} is separated by {separator}, not commas: save it "
                            "comma-separated, or tab-separated as .tsv", path, 1)
        reader = csv.reader(io.StringIO(text, newline=""), strict=True)
        try:
            table = list(reader)
        except csv.Error as error:
            raise DataError(f"{error} (a field holding a comma, quote or line break goes in double quotes, a quote "
                            "inside it doubled)", path, reader.line_num) from None
    table = [fields for fields in table if fields not in ([], [""])]  # blank lines
    header = [name.strip() for name in table[0]]
    for number, fields in enumerate(table[1:], start=1):
        if len(fields) != len(header):
            split = "tabs" if kind == "tsv" else "commas"
            raise DataError(f"row {number} has {len(fields)} fields split by {split}, the header has {len(header)}",
                            path)
    return header, [dict(zip(header, fields)) for fields in table[1:]]


def _json_rows(path: Path, text: str) -> tuple[list[str], list[dict]]:
    if text.lstrip().startswith("["):  # one array of objects
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as error:
            raise DataError(f"not JSON ({error.msg}, column {error.colno})", path, error.lineno) from None
        numbered = list(enumerate(rows, start=1))
    else:  # JSON lines
        numbered = []
        for number, line in enumerate(text.splitlines(), start=1):
            if line.strip():
                try:
                    numbered.append((number, json.loads(line)))
                except json.JSONDecodeError as error:
                    raise DataError(f"not a JSON object ({error.msg}, column {error.colno}); write one object "
                                    "per line", path, number) from None
    rows = []
    for number, row in numbered:
        if not isinstance(row, dict):
            raise DataError(f"row {number} is {_kind(row)}, not an object of columns", path)
        rows.append(row)
    columns = list(dict.fromkeys(name for row in rows for name in row))
    return columns, rows


def _kind(value) -> str:
    return ("empty" if value is None else "a list" if isinstance(value, list) else "an object" if isinstance(value, dict)
            else "true or false" if isinstance(value, bool) else "a number" if isinstance(value, int | float)
            else "text")


def _text(path: Path, number: int, name: str, value) -> str:
    if not isinstance(value, str):
        what = "empty" if value is None else f"{_kind(value)} ({json.dumps(value)[:40]}), not text"
        raise DataError(f"row {number}: the text column {name!r} is {what}", path)
    if not value.strip():
        raise DataError(f"row {number}: the text column {name!r} is empty", path)
    return value.strip()


def _label(path: Path, number: int, name: str, value) -> str:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, bool):
        return json.dumps(value)  # "true" / "false", as the file writes them
    if isinstance(value, int):
        return str(value)
    if value is None or isinstance(value, str):
        raise DataError(f"row {number}: the label column {name!r} is empty; give every row its class", path)
    raise DataError(f"row {number}: the label column {name!r} holds {_kind(value)} ({json.dumps(value)[:40]}); a "
                    "label is a class name, a whole number or true/false", path)
