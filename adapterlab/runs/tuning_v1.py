"""The fair comparison as first completed, on validation rows drawn at random from the training split.

Superseded by :mod:`adapterlab.runs.tuning`, whose SST-2 validation rows are whole sentences with every phrase
inside them kept out of training (random SST-2 rows leak: 61 % of them sit word for word inside a training
phrase), whose near ties are decided on two seeds and whose sizes and depths are tuned around their family's
rate. Labs 7 and 10 read its CoLA table (76 runs in ``data/reference_runs``) until every CoLA run of the new
protocol is stored, and judge it with :func:`adapterlab.runs.compare.compare`; nothing here trains.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .. import methods
from ..training import TrainConfig
from ..training.backbones import expected_backbone
from ..training.data import get_task
from ..training.experiment import load_splits
from .reference import seed_row
from .store import RunStore, find, run_key
from .tuning import MAX_EXTENSIONS, PROTOCOLS, SEEDS, Protocol
from .tuning import validation_curve

@dataclass(frozen=True)
class Point:
    """One point of the comparison: a method at some settings, tuned itself or sharing the rate of ``rate_of``."""

    label: str
    method: str
    settings: tuple = ()
    rate_of: str | None = None

    def config(self, protocol: Protocol, **changes) -> TrainConfig:
        return protocol.base(method=self.method, **dict(self.settings), **changes)


def lora_point(rank: int, rate_of: str | None = None) -> Point:
    """LoRA on query and value at rank r with α = 2r: the update's scale α/r = 2 at every rank, as the LoRA
    paper's α = r keeps it fixed, so one rate serves every r."""
    return Point(f"LoRA r={rank}", "lora", (("lora_rank", rank), ("lora_alpha", 2.0 * rank)), rate_of)


POINTS = (
    Point("Houlsby r=64", "houlsby", (("bottleneck", 64),)),
    *(Point(f"Houlsby r={r}", "houlsby", (("bottleneck", r),), "Houlsby r=64") for r in (2, 8, 32, 256)),
    Point("Pfeiffer r=64", "pfeiffer", (("bottleneck", 64),)),
    Point("Parallel r=64", "parallel", (("bottleneck", 64),)),
    lora_point(8),
    lora_point(64),
    Point("top-2 layers", "top_k", (("top_k", 2),)),
    *(Point(f"top-{k} layers", "top_k", (("top_k", k),), "top-2 layers") for k in (1, 3)),
    Point("LayerNorm only", "layernorm"),
    Point("BitFit", "bitfit"),
    Point("head only", "head"),
    Point("full fine-tuning", "full"),
)


def _neighbour(grid: list[float], upward: bool) -> float:
    """One step beyond the grid's edge, by the ratio of the two values at that edge."""
    a, b = (grid[-2], grid[-1]) if upward else (grid[1], grid[0])
    return float(f"{b * (b / a):.1g}")


@dataclass
class Selection:
    """The seed-0 runs over a point's grid and what they select: ``rate`` (None while runs are missing),
    ``at_edge`` when the best rate is still at an edge the protocol may not extend further."""

    point: Point
    grid: list
    scores: dict
    rate: float | None
    at_edge: bool = False


def select(point: Point, protocol: Protocol, lookup) -> tuple[Selection, list[TrainConfig]]:
    """The selection for a tuned point, and the seed-0 configs it still needs (``lookup(config)`` gives a
    stored record or None). The grid grows one step past an edge whose rate is best, up to MAX_EXTENSIONS."""
    grid = sorted(methods.get(point.method).learning_rates)
    for _ in range(MAX_EXTENSIONS + 1):
        configs = [point.config(protocol, learning_rate=rate, seed=SEEDS[0]) for rate in grid]
        records = [lookup(config) for config in configs]
        needed = [config for config, record in zip(configs, records) if record is None]
        if needed:
            return Selection(point, grid, {}, None), needed
        scores = {rate: validation_score(record) for rate, record in zip(grid, records)}
        best = max(grid, key=lambda rate: (scores[rate], -rate))
        if best not in (grid[0], grid[-1]) or len(grid) - len(methods.get(point.method).learning_rates) \
                >= MAX_EXTENSIONS:
            return Selection(point, grid, scores, best, at_edge=best in (grid[0], grid[-1])), []
        grid = sorted([*grid, _neighbour(grid, upward=best == grid[-1])])
    raise AssertionError("unreachable")


def validation_score(record: dict) -> float:
    """What a tuned run is chosen by: its validation score at the step it kept (a diverged run: -inf)."""
    value = record.get("validation_metric")
    return -math.inf if value is None or record.get("status") == "diverged" else value


def plan(protocol: Protocol, lookup, points=POINTS) -> tuple[list[TrainConfig], list[TrainConfig], dict]:
    """The runs the protocol can start now, the runs it waits on (their rate is not selected yet), and each
    point's selection so far."""
    selections, ready, waiting = {}, [], []
    for point in points:
        if point.rate_of is None:
            selection, needed = select(point, protocol, lookup)
            selections[point.label] = selection
            ready += needed
    # The seeds of the points that choose a rate come first: they carry the comparison's claims, and a
    # protocol stopped early should have them before the points that borrow a rate.
    for point in sorted(points, key=lambda point: point.rate_of is not None):
        rate = selections[point.rate_of or point.label].rate if (point.rate_of or point.label) in selections else None
        if point.rate_of is not None:
            selections[point.label] = Selection(point, [], {}, rate)
        seeds_configs = [point.config(protocol, learning_rate=rate, seed=seed) for seed in SEEDS] if rate else []
        if rate is None:
            waiting.append(point)
        ready += [config for config in seeds_configs if lookup(config) is None]
    unique = list({_identity(config): config for config in ready}.values())
    return unique, waiting, selections


def progress(task: str, lookup, points=POINTS) -> str:
    """How far the protocol of ``task`` has got: every run stored, or how many runs can start now and how many
    points still wait for a rate, with the command that makes them (the labs print it under a tuned table)."""
    ready, waiting, _ = plan(PROTOCOLS[task], lookup, points)
    if not ready and not waiting:
        return f"every run of the {task} protocol is stored"
    runs = f"{len(ready)} run can" if len(ready) == 1 else f"{len(ready)} runs can"
    waits = f"{len(waiting)} point waits" if len(waiting) == 1 else f"{len(waiting)} points wait"
    return (f"the {task} protocol is not finished: {runs} start now and {waits} for a rate; "
            f"`python -m adapterlab tune --task {task}` makes them (stored runs are skipped)")


def _identity(config: TrainConfig) -> str:
    return repr(sorted(dataclasses.asdict(config).items()))


def stored_lookup(task: str, stores: list[RunStore], backbone: str, data_dir=None):
    """``lookup(config)``: the stored record of a tuned run, or None (the rows read once per seed)."""
    protocol = PROTOCOLS[task]
    splits = {}

    def lookup(config):
        if config.seed not in splits:
            random_rows = dataclasses.replace(get_task(task), nested_rows=False)  # the first protocol's split
            splits[config.seed] = load_splits(random_rows, data_dir, protocol.max_train, None, config.seed,
                                              protocol.validation_rows)
        train, dev, validation = splits[config.seed]
        found = find(run_key(task, config, expected_backbone(backbone), train, dev, config.precision, validation), stores)
        return None if found is None else found.record

    return lookup


def tuned_rows(task: str, stores: list[RunStore], backbone: str, data_dir=None, points=POINTS) -> list[dict]:
    """One row per point: its selected rate, the seed-0 validation score of every rate tried, and the dev
    mean ± sample spread over the seeds stored at that rate, with the :class:`~.reference.SeedRow` they come
    from under ``seed_row`` (its config at the selected rate, or the method's default while none is selected:
    the figure still counts its parameters), and seed 0's validation curve at that rate under ``curve``.
    Labs 7 and 10 read the CoLA rows."""
    protocol = PROTOCOLS[task]
    lookup = stored_lookup(task, stores, backbone, data_dir)
    _, _, selections = plan(protocol, lookup, points)
    rows = []
    for point in points:
        selection = selections[point.label]
        tuned = selections[point.rate_of] if point.rate_of else selection
        config = point.config(protocol, learning_rate=selection.rate or methods.get(point.method).learning_rate,
                              seed=SEEDS[0])
        records = [lookup(dataclasses.replace(config, seed=seed)) for seed in SEEDS] if selection.rate else []
        seeds = seed_row(point.label, config, SEEDS, records or [None] * len(SEEDS))
        found = [record for record in records if record is not None]
        rows.append({"label": point.label, "method": point.method, "rate": selection.rate,
                     "rate_of": point.rate_of, "grid": dict(tuned.scores), "at_edge": tuned.at_edge,
                     "mean": seeds.mean, "std": seeds.std, "n": seeds.n, "values": list(seeds.values),
                     "trained_parameters": found[0].get("trained_parameters") if found else None,
                     "seed_row": seeds, "curve": validation_curve(records[0]) if records and records[0] else []})
    return rows


#: The paper's numbers beside ours (Table 1: BERT-large on the GLUE test server, so shapes compare, not values).
PAPER_ROWS = {("sst2", "full fine-tuning"): "sst2_full", ("sst2", "Houlsby r=64"): "sst2_adapters",
              ("cola", "full fine-tuning"): "cola_full", ("cola", "Houlsby r=64"): "cola_adapters"}


def tuned_table(rows: list[dict], task: str) -> str:
    """:func:`tuned_rows` as a text table: each point's selected rate (and whose), its trained parameters, its dev
    mean ± sample spread over the seeds stored, and the paper's number where Table 1 has one."""
    from .reference import PAPER

    metric = "MCC" if task == "cola" else "accuracy"
    lines = [f"{'point':<18} {'selected lr':>12} {'trained':>11} {'dev ' + metric + ' ×100 (seeds)':>26} {'paper':>6}"]
    for row in rows:
        rate = "—" if row["rate"] is None else f"{row['rate']:g}" + ("*" if row["rate_of"] else "") + \
            ("!" if row["at_edge"] else "")
        trained = "—" if row["trained_parameters"] is None else f"{row['trained_parameters']:,}"
        score = (f"{100 * row['mean']:.1f} ± {100 * row['std']:.1f} ({row['n']})" if row["n"] > 1 else
                 f"{100 * row['mean']:.1f} ({row['n']})" if row["n"] == 1 else "not stored")
        paper = PAPER_ROWS.get((task, row["label"]))
        paper = f"{PAPER[paper].value:.1f}" if paper else ""
        lines.append(f"{row['label']:<18} {rate:>12} {trained:>11} {score:>26} {paper:>6}")
    lines.append("* a shared rate   ! best rate at the grid's edge   paper: Table 1, BERT-large, GLUE test")
    return "\n".join(lines)
