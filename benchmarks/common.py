"""What every benchmark script shares: where the GLUE data is, a note of the machine, a plain table, the JSON record.

The scripts measure on the real GLUE dev/train sets only; toy data would make their numbers meaningless, so a
missing GLUE folder is an error here rather than a silent fall-back.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from adapterlab.data import DATA_ENV

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
#: Where the shared, read-only GLUE copy lies next to a checkout of this repository.
SIBLING_GLUE = ROOT.parent / "shared" / "data" / "glue"


def parser(description: str, default_threads: int | None = None) -> argparse.ArgumentParser:
    """The options every script takes: --data, --quick, --out, --threads."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--data", help=f"GLUE folder holding SST-2/ and CoLA/ (default: ${DATA_ENV}, then {SIBLING_GLUE})")
    p.add_argument("--quick", action="store_true",
                   help="a few-seconds smoke run; its JSON goes to a temporary folder, not to benchmarks/results/")
    p.add_argument("--out", help="where to write the JSON record (default: benchmarks/results/<name>.json)")
    p.add_argument("--threads", type=int, default=default_threads,
                   help=f"torch threads (default {default_threads or 'torch default'}). On a machine whose cores are "
                        "busy with other work, 1 thread can train several times faster than 2: a thread that "
                        "waits for a descheduled sibling at every operator wastes its slice")
    return p


def set_threads(args) -> None:
    if args.threads is not None:
        if args.threads < 1:
            sys.exit(f"error: --threads must be >= 1; got {args.threads}")
        torch.set_num_threads(args.threads)


def glue_dir(data: str | None) -> Path:
    """The GLUE folder to read: --data, then $ADAPTERLAB_DATA, then ../shared/data/glue; an error if none exists."""
    for candidate in (data, os.environ.get(DATA_ENV), SIBLING_GLUE):
        if candidate:
            path = Path(candidate).expanduser()
            if (path / "SST-2" / "train.tsv").is_file():
                return path
            if candidate is not SIBLING_GLUE:
                sys.exit(f"error: {path} is not a GLUE folder (no SST-2/train.tsv); pass --data DIR or set {DATA_ENV}")
    sys.exit(f"error: the benchmarks need the real GLUE data: pass --data DIR or set {DATA_ENV} "
             f"to a folder holding SST-2/ and CoLA/ in the GLUE TSV layout")


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def machine() -> dict:
    """Facts that decide how far the timings can be trusted and compared."""
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "commit": commit,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
        "load_average_1_5_15min": load_average(),
    }


def machine_line(info: dict) -> str:
    load = info["load_average_1_5_15min"]
    load_text = f", load average {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f} (1/5/15 min)" if load else ""
    return (f"{info['date']}  torch {info['torch']}, {info['torch_threads']} threads, "
            f"{info['cpu_count']} CPUs{load_text}")


def table(rows: list[dict], columns: list[tuple[str, str, str]]) -> str:
    """A plain-text table. ``columns`` holds (key, heading, format spec); text columns align left."""
    cells = []
    for row in rows:
        line = []
        for key, _, spec in columns:
            value = row.get(key)
            line.append("–" if value is None else format(value, spec))
        cells.append(line)
    widths = [max(len(heading), *(len(line[i]) for line in cells)) if cells else len(heading)
              for i, (_, heading, _) in enumerate(columns)]
    numeric = [bool(spec) and spec[-1] in "dfeg%" for _, _, spec in columns]

    def render(values):
        return "  ".join(v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric)).rstrip()

    return "\n".join([render([h for _, h, _ in columns]), render(["-" * w for w in widths])]
                     + [render(line) for line in cells])


def output_path(name: str, args) -> Path:
    """benchmarks/results/<name>.json, or a temporary file for --quick (a smoke run is no record)."""
    if args.out:
        return Path(args.out)
    if args.quick:
        return Path(tempfile.gettempdir()) / "adapterlab-benchmarks" / f"{name}-quick.json"
    return RESULTS / f"{name}.json"


def publish(name: str, args, payload: dict, report: str) -> int:
    """Write the JSON record (see :func:`output_path`), print the report and where the record went; 0."""
    path = output_path(name, args)
    write_json(path, payload)
    print()
    print(report)
    print(f"\nwrote {path}")
    return 0


def write_json(path: Path, payload: dict) -> None:
    """Write atomically (a reader polling the file never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)
