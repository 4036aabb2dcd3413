"""A fair comparison: every method tuned on a validation split, then trained over seeds at its selected rate.

Two methods compared at one shared recipe compare the recipe, not the methods: a rate that suits adapters
starves full fine-tuning, and a few hundred steps leave slow learners at the majority class. The protocol
(:data:`PROTOCOLS`, :data:`POINTS`), as ``adapterlab tune`` runs it:

1. **Validation.** Rows carved out of each task's training split (the same rows for every run,
   :func:`adapterlab.training.data.carve_validation`; for SST-2 whole sentences, with every phrase inside them
   kept out of training) choose everything: the evaluation step each run keeps and each method's learning
   rate. The dev set only reports.
2. **A fixed budget.** One pass over 20,000 SST-2 rows, three epochs of CoLA, with the validation curve every
   ``eval_every`` steps. Whether that budget is enough is measured, not assumed (:data:`BUDGET_PROTOCOLS`).
3. **Each method its own rate.** Seed 0 over the method's grid (declared with the method,
   :mod:`adapterlab.methods`). The other bottleneck sizes and top-k depths are tuned too, over the rate r = 64
   (or k = 2) selected and its two neighbours, which keeps the protocol within hours of a 2-core laptop. Where
   the runner-up's validation score lies within the validation set's own noise of the best
   (:func:`validation_noise`), one seed cannot choose: both leading rates run a second seed and the better mean
   over the two seeds wins. A selected rate at the grid's edge, by one seed or by two, extends the grid one
   step beyond it (up to :data:`MAX_EXTENSIONS` steps) and the selection is made again.
4. **Seeds, fixed in advance.** Every point runs the same seeds, :data:`SEEDS` (0-4), at its selected rate,
   whatever the first of them show: the design has one look. The dev set reports mean ± sample spread, and
   the course's claims (:data:`CLAIMS`) are read once, paired by seed, as one family whose error is controlled
   (:func:`adapterlab.runs.compare.family`).

Every run goes into the run store as it finishes, so a stopped protocol resumes, and ``--shard I/N`` splits
it over processes: each run has one owner shard (by its key); a shard with none of its own runs ready trains
another shard's that no process holds (:mod:`.leases`), and waits only where a selection needs runs
still in training.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from dataclasses import dataclass

from .. import methods
from ..training import TrainConfig
from ..training.backbones import expected_backbone
from ..training.experiment import load_splits
from .compare import compare, family
from .leases import Leases
from .reference import seed_row
from .store import RunStore, find, run_key, run_or_load
from .verdict_table import VerdictTable

#: Seeds of the reported runs, the same five for every point, fixed before any was run; the grid is searched
#: on the first (and a near tie on the first two).
SEEDS = (0, 1, 2, 3, 4)
#: Seeds of the budget check's longer runs (fixed in advance too; they pair with the same seeds' standard runs).
BUDGET_SEEDS = (0, 1, 2)
#: How many steps a grid may grow beyond an edge before the protocol gives up and says so.
MAX_EXTENSIONS = 3


@dataclass(frozen=True)
class Protocol:
    """What every tuned run of a task shares: its rows, its length, when it evaluates."""

    task: str
    validation_rows: int
    max_train: int | None
    epochs: float
    eval_every: int

    def base(self, **settings) -> TrainConfig:
        return TrainConfig(validation_rows=self.validation_rows, epochs=self.epochs, eval_every=self.eval_every,
                           batch_size=32, precision="fp32", train_pooler=True, progress=False, **settings)


#: SST-2: 1,000 validation sentences, one pass over 20,000 of the rest (625 steps), evaluated every 125 steps.
#: CoLA: 800 validation rows, three epochs over the other 7,751 (729 steps), evaluated every 81 steps.
PROTOCOLS = {
    "sst2": Protocol("sst2", validation_rows=1000, max_train=20_000, epochs=1.0, eval_every=125),
    "cola": Protocol("cola", validation_rows=800, max_train=None, epochs=3.0, eval_every=81),
}
#: The budget check: the headline pair (:data:`BUDGET_POINTS`) at their selected rates, trained far longer —
#: SST-2 over every training row it has (one epoch, 1,754 steps), CoLA for 20 epochs (4,860 steps; the paper
#: tried 3 and 20) — to see whether the standard budget changed either score or the verdict between them.
BUDGET_PROTOCOLS = {
    "sst2": Protocol("sst2", validation_rows=1000, max_train=None, epochs=1.0, eval_every=250),
    "cola": Protocol("cola", validation_rows=800, max_train=None, epochs=20.0, eval_every=243),
}
BUDGET_POINTS = ("Houlsby r=64", "full fine-tuning")


@dataclass(frozen=True)
class Point:
    """One point of the comparison: a method at some settings, tuned over its method's grid, or (``near``)
    over the rate another point selected and that rate's two neighbours on the method's grid."""

    label: str
    method: str
    settings: tuple = ()
    near: str | None = None

    def config(self, protocol: Protocol, **changes) -> TrainConfig:
        return protocol.base(method=self.method, **dict(self.settings), **changes)


def lora_point(rank: int) -> Point:
    """LoRA on query and value at rank r with α = 2r: the update's scale α/r = 2 at every rank, as the LoRA
    paper's α = r keeps it fixed. α is not tuned apart from the rate: the update is α/r·BA with B starting at
    zero, and Adam's steps on B do not grow with the gradient's scale, so multiplying α by c multiplies the
    early updates by c as a c-times larger rate would; the rate grid (steps of 3x, grown past a winning edge)
    therefore covers α too."""
    return Point(f"LoRA r={rank}", "lora", (("lora_rank", rank), ("lora_alpha", 2.0 * rank)))


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
#: The comparisons the course draws from the tuned table (labs 6, 7 and 10), as (A, B): read with the course's
#: rule, paired by seed, as one family with every row's verdict against Houlsby r = 64 and full fine-tuning.
CLAIMS = (
    ("full fine-tuning", "Houlsby r=64"),
    ("LoRA r=8", "Houlsby r=64"),
    ("head only", "Houlsby r=64"),
    *((f"Houlsby r={r}", "Houlsby r=64") for r in (2, 8, 32, 256)),
    ("top-2 layers", "top-1 layers"),  # the deeper first, as the shared recipe's statements read them
    ("top-3 layers", "top-2 layers"),
)


def _step(grid: list[float], upward: bool, rates=()) -> float:
    """One step beyond the grid's edge: the next of the method's ``rates`` past it, else by the ratio of the
    two values at that edge."""
    beyond = [rate for rate in rates if (rate > grid[-1] if upward else rate < grid[0])]
    if beyond:
        return min(beyond) if upward else max(beyond)
    a, b = (grid[-2], grid[-1]) if upward else (grid[1], grid[0])
    return float(f"{b * (b / a):.1g}")


def neighbours(rates, centre: float) -> list[float]:
    """``centre`` and the rates on either side of it on the grid ``rates`` (one step past an edge where the
    centre sits at it or beyond)."""
    grid = sorted({*rates, centre})
    at = grid.index(centre)
    below = grid[at - 1] if at > 0 else _step(grid, upward=False)
    above = grid[at + 1] if at + 1 < len(grid) else _step(grid, upward=True)
    return [below, centre, above]


def validation_noise(score: float, metric: str, rows: int) -> float:
    """The standard error of one validation score on ``rows`` rows: sqrt(p(1-p)/n) for accuracy and F1,
    (1 - φ²)/sqrt(n - 1) for the Matthews correlation φ (the large-sample error of a correlation)."""
    if metric == "matthews":
        return (1 - min(score * score, 1.0)) / math.sqrt(rows - 1)
    p = min(max(score, 0.0), 1.0)
    return math.sqrt(p * (1 - p) / rows)


@dataclass
class Selection:
    """A point's runs at seed 0 over its grid and what they select: ``rate`` (None while runs are missing),
    ``at_edge`` when the best rate is still at an edge the protocol may not extend further, and, where the two
    leading rates were within the validation noise, their mean validation scores over seeds 0 and 1
    (``tie_scores``)."""

    point: Point
    grid: list
    scores: dict
    rate: float | None
    at_edge: bool = False
    tie_scores: dict = dataclasses.field(default_factory=dict)


def select(point: Point, protocol: Protocol, lookup, centre: float | None = None) -> tuple[Selection, list[TrainConfig]]:
    """The selection for a point (over its method's grid, or over ``centre`` and its neighbours), and the runs
    it still needs (``lookup(config)`` gives a stored record or None). A near tie at seed 0 asks for seed 1 at
    the two leading rates. Whenever the rate chosen (by one seed or by two) sits at the grid's edge, the grid
    grows one step past it, up to MAX_EXTENSIONS, and the choice is made again."""
    rates = methods.get(point.method).learning_rates
    start = sorted(rates) if centre is None else neighbours(rates, centre)
    grid = list(start)
    while True:
        configs = [point.config(protocol, learning_rate=rate, seed=SEEDS[0]) for rate in grid]
        records = [lookup(config) for config in configs]
        needed = [config for config, record in zip(configs, records) if record is None]
        if needed:
            return Selection(point, grid, {}, None), needed
        scores = {rate: validation_score(record) for rate, record in zip(grid, records)}
        growing = len(grid) - len(start) < MAX_EXTENSIONS
        best = max(grid, key=lambda rate: (scores[rate], -rate))
        if best in (grid[0], grid[-1]) and growing:  # seed 0 alone already points past the edge
            grid = sorted([*grid, _step(grid, upward=best == grid[-1], rates=rates)])
            continue
        selection, needed = _choose(point, protocol, lookup, grid, scores, records)
        if needed or selection.rate is None:
            return selection, needed
        if selection.at_edge and growing:  # two seeds chose the edge
            grid = sorted([*grid, _step(grid, upward=selection.rate == grid[-1], rates=rates)])
            continue
        return selection, []


def _choose(point: Point, protocol: Protocol, lookup, grid: list, scores: dict, records: list):
    """The rate seed 0 chooses on ``grid``, or, where the runner-up lies within twice the validation noise of
    the best, the better of the two by their mean over seeds 0 and 1 (with the seed-1 runs still needed)."""
    best = max(grid, key=lambda rate: (scores[rate], -rate))
    selection = Selection(point, grid, scores, best, at_edge=best in (grid[0], grid[-1]))
    runner_up = max((rate for rate in grid if rate != best), key=lambda rate: (scores[rate], -rate), default=None)
    record = records[grid.index(best)]
    if runner_up is None or not math.isfinite(scores[best]) or not math.isfinite(scores[runner_up]) or \
            scores[best] - scores[runner_up] >= 2 * validation_noise(scores[best], record["metric"],
                                                                   protocol.validation_rows):
        return selection, []
    leading = sorted((best, runner_up))
    seconds = {rate: point.config(protocol, learning_rate=rate, seed=SEEDS[1]) for rate in leading}
    found = {rate: lookup(config) for rate, config in seconds.items()}
    missing = [seconds[rate] for rate in leading if found[rate] is None]
    if missing:
        return Selection(point, grid, scores, None), missing
    selection.tie_scores = {rate: (scores[rate] + validation_score(found[rate])) / 2 for rate in leading}
    selection.rate = max(leading, key=lambda rate: (selection.tie_scores[rate], -rate))
    selection.at_edge = selection.rate in (grid[0], grid[-1])
    return selection, []


def validation_score(record: dict) -> float:
    """What a tuned run is chosen by: its validation score at the step it kept (a diverged run: -inf)."""
    value = record.get("validation_metric")
    return -math.inf if value is None or record.get("status") == "diverged" else value


def plan(protocol: Protocol, lookup, points=POINTS) -> tuple[list[TrainConfig], list[Point], dict]:
    """The runs the protocol can start now (in the order they should run), the points still waiting for a
    rate, and each point's selection so far."""
    selections, grid_runs, waiting = {}, [], []
    for point in sorted(points, key=lambda point: point.near is not None):  # a point before those near it
        if point.near is not None:
            source = selections.get(point.near)
            if source is None or source.rate is None:
                waiting.append(point)
                continue
            selection, needed = select(point, protocol, lookup, centre=source.rate)
        else:
            selection, needed = select(point, protocol, lookup)
        selections[point.label] = selection
        grid_runs += needed
        if selection.rate is None:
            waiting.append(point)
    seed_runs = []
    # The seeds of the points that choose a rate of their own come first: they carry the comparison's claims,
    # and a protocol stopped early should have them before the sizes and depths tuned near them.
    for point in sorted(points, key=lambda point: point.near is not None):
        selection = selections.get(point.label)
        if selection is None or selection.rate is None:
            continue
        for seed in SEEDS:
            config = point.config(protocol, learning_rate=selection.rate, seed=seed)
            if lookup(config) is None:
                seed_runs.append(config)
    ready = grid_runs + seed_runs + budget_runs(protocol, lookup, selections, points)
    unique = list({_identity(config): config for config in ready}.values())
    return unique, waiting, selections


def budget_runs(protocol: Protocol, lookup, selections: dict, points=POINTS) -> list[TrainConfig]:
    """The budget check's runs still to make: :data:`BUDGET_POINTS` at their selected rates over
    :data:`BUDGET_SEEDS`, in :data:`BUDGET_PROTOCOLS`' longer runs (once both rates are selected)."""
    longer = BUDGET_PROTOCOLS[protocol.task]
    labels = {point.label: point for point in points}
    if protocol != PROTOCOLS.get(protocol.task) or not all(
            label in labels and label in selections and selections[label].rate for label in BUDGET_POINTS):
        return []
    configs = [labels[label].config(longer, learning_rate=selections[label].rate, seed=seed)
               for seed in BUDGET_SEEDS for label in BUDGET_POINTS]
    return [config for config in configs if lookup(config) is None]


def protocol_for(task: str, config: TrainConfig) -> Protocol:
    """The protocol a tuned run belongs to (the standard one or the budget check's), told by its length and
    evaluation step; its ``max_train`` decides the rows the run trains on."""
    for protocol in (PROTOCOLS[task], BUDGET_PROTOCOLS[task]):
        if (config.epochs, config.eval_every, config.validation_rows) == \
                (protocol.epochs, protocol.eval_every, protocol.validation_rows):
            return protocol
    raise ValueError(f"the run ({describe(config)}, {config.epochs:g} epochs, evaluated every {config.eval_every} "
                     f"steps) belongs to no {task} protocol")


def continue_command(task: str, *, points=None, backbone: str | None = None, data_dir=None, store=None) -> str:
    """The ``adapterlab tune`` command that goes on with this protocol: its task, points, backbone, data and
    store, so that copying it never starts another protocol."""
    import shlex

    parts = ["python -m adapterlab tune", f"--task {task}"]
    if points is not None and tuple(points) != POINTS:
        parts.append(f"--points {shlex.quote(','.join(point.label for point in points))}")
    if backbone is not None and backbone != "bert-base-uncased":
        parts.append(f"--backbone {shlex.quote(str(backbone))}")
    if data_dir is not None:
        parts.append(f"--data {shlex.quote(str(data_dir))}")
    if store is not None:
        parts.append(f"--store {shlex.quote(str(store))}")
    return " ".join(parts)


def progress(task: str, lookup, points=POINTS, command: str | None = None) -> str:
    """How far the protocol of ``task`` has got: every run stored, or how many runs can start now and how many
    points still wait for a rate, with the command that makes them (``command``: the one that continues this
    protocol, :func:`continue_command`). The labs print it under a tuned table."""
    ready, waiting, _ = plan(PROTOCOLS[task], lookup, points)
    if not ready and not waiting:
        return f"every run of the {task} protocol is stored"
    runs = f"{len(ready)} run can" if len(ready) == 1 else f"{len(ready)} runs can"
    waits = f"{len(waiting)} point waits" if len(waiting) == 1 else f"{len(waiting)} points wait"
    command = command or continue_command(task, points=points)
    return (f"the {task} protocol is not finished: {runs} start now and {waits} for a rate; "
            f"`{command}` makes them (stored runs are skipped)")


def _identity(config: TrainConfig) -> str:
    return repr(sorted(dataclasses.asdict(config).items()))


def owner(config: TrainConfig, count: int) -> int:
    """The shard (1..count) that trains a run: fixed by its settings, the same in every shard's process."""
    digest = hashlib.sha256(_identity(config).encode()).digest()
    return int.from_bytes(digest[:4], "big") % count + 1


def stored_lookup(task: str, stores: list[RunStore], backbone: str, data_dir=None):
    """``lookup(config)``: the stored record of a tuned run (of the standard protocol or the budget check's),
    or None. The rows are read once per seed and protocol."""
    splits = {}

    def lookup(config):
        protocol = protocol_for(task, config)
        if (config.seed, protocol.max_train) not in splits:
            splits[config.seed, protocol.max_train] = load_splits(task, data_dir, protocol.max_train, None,
                                                                  config.seed, protocol.validation_rows)
        train, dev, validation = splits[config.seed, protocol.max_train]
        found = find(run_key(task, config, expected_backbone(backbone), train, dev, config.precision, validation), stores)
        return None if found is None else found.record

    return lookup


def tuned_rows(task: str, stores: list[RunStore], backbone: str, data_dir=None, points=POINTS) -> list[dict]:
    """One row per point: its selected rate, the seed-0 validation score of every rate tried (and the two-seed
    means of a near tie), and the dev mean ± sample spread over the seeds stored at that rate (:data:`SEEDS`), with the :class:`~.reference.SeedRow` they come from under ``seed_row``
    (its config at the selected rate, or the method's default while none is selected: the figure still counts
    its parameters), and seed 0's validation curve at that rate under ``curve``. Labs 6, 7 and 10 read these."""
    protocol = PROTOCOLS[task]
    lookup = stored_lookup(task, stores, backbone, data_dir)
    _, _, selections = plan(protocol, lookup, points)
    rows = []
    for point in points:
        selection = selections.get(point.label) or Selection(point, [], {}, None)
        config = point.config(protocol, learning_rate=selection.rate or methods.get(point.method).learning_rate,
                              seed=SEEDS[0])
        seeds = SEEDS
        records = [lookup(dataclasses.replace(config, seed=seed)) for seed in seeds] if selection.rate else \
            [None] * len(seeds)
        row = seed_row(point.label, config, seeds, records)
        found = [record for record in records if record is not None]
        rows.append({"label": point.label, "method": point.method, "rate": selection.rate, "near": point.near,
                     "grid": dict(selection.scores), "tie": dict(selection.tie_scores), "at_edge": selection.at_edge,
                     "mean": row.mean, "std": row.std, "n": row.n, "values": list(row.values), "seeds": seeds,
                     "trained_parameters": found[0].get("trained_parameters") if found else None,
                     "seed_row": row, "curve": validation_curve(records[0]) if records[0] else []})
    return rows


def budget_rows(task: str, stores: list[RunStore], backbone: str, data_dir=None) -> list[dict]:
    """The budget check (:data:`BUDGET_PROTOCOLS`): for each of :data:`BUDGET_POINTS`, its row at the standard
    budget (``standard``, a :class:`~.reference.SeedRow` over :data:`BUDGET_SEEDS`, paired with the long runs)
    and at the long one (``long``), at the rate the standard protocol selected, and seed 0's long validation
    curve."""
    points = tuple(point for point in POINTS if point.label in BUDGET_POINTS)
    lookup = stored_lookup(task, stores, backbone, data_dir)
    _, _, selections = plan(PROTOCOLS[task], lookup, points)
    rows = []
    for point in points:
        rate = selections[point.label].rate
        made = {}
        for name, protocol in (("standard", PROTOCOLS[task]), ("long", BUDGET_PROTOCOLS[task])):
            config = point.config(protocol, learning_rate=rate or methods.get(point.method).learning_rate)
            records = [lookup(dataclasses.replace(config, seed=seed)) if rate else None for seed in BUDGET_SEEDS]
            made[name] = (seed_row(point.label, config, BUDGET_SEEDS, records), records)
        long_records = made["long"][1]
        rows.append({"label": point.label, "rate": rate, "standard": made["standard"][0], "long": made["long"][0],
                     "steps": {name: _steps(records) for name, (_, records) in made.items()},
                     "curve": validation_curve(long_records[0]) if long_records[0] else []})
    return rows


def _steps(records: list) -> int | None:
    found = [record for record in records if record is not None and record.get("evals")]
    return found[0]["evals"][-1]["step"] if found else None


def budget_verdicts(rows: list[dict]) -> dict:
    """The budget check's family of verdicts (paired by seed, Holm's procedure): each method long against
    standard, and the pair at each budget; None where a side is not stored yet."""
    by_label = {row["label"]: row for row in rows}
    verdicts = {}
    for row in rows:
        ready = min(row["long"].n, row["standard"].n) > 1
        verdicts[row["label"], "long against standard"] = \
            compare(row["long"], row["standard"], names=("long", "standard")) if ready else None
    for name in ("standard", "long"):
        a, b = (by_label[label][name] for label in BUDGET_POINTS)
        verdicts["the pair", f"at the {name} budget"] = compare(b, a) if min(a.n, b.n) > 1 else None
    return family(verdicts)


def budget_table(rows: list[dict], task: str) -> str:
    """:func:`budget_rows` as text: each method's dev mean ± spread at the standard budget and at the long one
    (narrow enough for a slide); its verdicts are :func:`budget_verdict_table`."""
    metric = "MCC" if task == "cola" else "accuracy"
    lines = [f"{'point':<18} {'standard budget':>24} {'long budget':>24}"]
    for row in rows:
        cells = [f"{100 * row[name].mean:.1f} ± {100 * row[name].std:.1f} ({row['steps'][name]} steps)"
                 if row[name].n > 1 else "not stored" for name in ("standard", "long")]
        lines.append(f"{row['label']:<18} {cells[0]:>24} {cells[1]:>24}")
    seeds = f"{BUDGET_SEEDS[0]}-{BUDGET_SEEDS[-1]}"
    lines.append(f"dev {metric} ×100, mean ± sample spread over seeds {seeds}, each method at the rate the standard "
                 "protocol selected")
    return "\n".join(lines)


def budget_verdict_table(rows: list[dict]) -> VerdictTable:
    """The budget check's verdicts (:func:`budget_verdicts`, one family) as a table, each row naming the budget."""
    verdicts = budget_verdicts(rows)
    pair = " vs ".join(BUDGET_POINTS[::-1])  # as budget_verdicts compares them
    labels = [f"{what.removeprefix('at the ')}: {pair}" if subject == "the pair" else f"{subject}: long vs standard"
              for subject, what in verdicts]
    return VerdictTable(tuple(verdicts.values()), tuple(labels), title="the budget check, paired by seed")


def validation_curve(record: dict) -> list[tuple[int, float]]:
    """(step, validation score) at every evaluation of a tuned run (a flat tail under a rate that decays to zero
    does not show that the run converged: the budget check, :func:`budget_rows`, does)."""
    return [(e["step"], e["validation"][record["metric"]]) for e in record.get("evals", []) if "validation" in e]


def run_protocol(task: str, *, stores: list[RunStore], shard: tuple[int, int] = (1, 1), backbone: str,
                 data_dir=None, points=POINTS, poll_seconds: float = 10.0, on_run=None, log=print) -> dict:
    """Train this shard's share of the protocol until every point has its seeds (see the module docstring);
    return the selections. ``on_run(lookup)`` follows each run trained or found. While every run it could
    start is held by another process, or a selection waits on runs still training, it says so in one line
    (again only when what it waits for changes) and looks again every ``poll_seconds``."""
    protocol = PROTOCOLS[task]
    lookup = stored_lookup(task, stores, backbone, data_dir)
    leases = Leases(([store for store in stores if not store.read_only] or stores)[0].folder / ".leases")
    said = None

    while True:
        ready, waiting, selections = plan(protocol, lookup, points)
        mine = [config for config in ready if owner(config, shard[1]) == shard[0]]
        others = [config for config in reversed(ready) if owner(config, shard[1]) != shard[0]]  # from the far end
        config = next((config for config in mine + others
                       if leases.take(_lease(task, backbone, config), describe(config))), None)
        if config is not None:
            share = f"{len(mine)} of this shard's runs ready" if mine else \
                f"helping shard {owner(config, shard[1])}: none of this shard's runs ready"
            log(f"tune {task} shard {shard[0]}/{shard[1]}: {describe(config)} ({share}, {len(ready)} in all)")
            try:
                lookup_result = run_or_load(task, config, stores=stores, backbone=backbone, data_dir=data_dir,
                                            max_train=protocol_for(task, config).max_train)
            finally:
                leases.release(_lease(task, backbone, config))
            said = None
            if lookup_result.result is not None and lookup_result.result.interrupted:
                raise KeyboardInterrupt  # Ctrl-C or SIGTERM stopped the run: it is not stored, and the protocol stops
            if on_run is not None:
                on_run(lookup_result)
            continue
        if not ready and not waiting:
            return selections
        line = _waiting_line(task, shard, ready, waiting, lambda config: leases.holder(_lease(task, backbone, config)))
        if line != said:
            log(line)
            said = line
        time.sleep(poll_seconds)


def describe(config: TrainConfig) -> str:
    """A run in a few words: its method, learning rate and seed (and its length, for the budget check's)."""
    longer = f", {config.epochs:g} epochs" if config.eval_every in \
        {protocol.eval_every for protocol in BUDGET_PROTOCOLS.values()} else ""
    return f"{config.method} lr {config.peak_learning_rate:g} seed {config.seed}{longer}"


def _waiting_line(task: str, shard: tuple[int, int], ready: list, waiting: list, holder) -> str:
    """What a shard with nothing to start waits for: the runs other processes hold (who and since when) and
    the points whose rate waits on them."""
    held = [f"{describe(config)} (held by {holder(config) or 'a process that just finished it'})" for config in ready]
    shown = "; ".join(held[:3]) + (f"; and {len(held) - 3} more" if len(held) > 3 else "")
    points = f"{len(waiting)} point{'s' if len(waiting) != 1 else ''} wait{'s' if len(waiting) == 1 else ''} " \
             f"for a rate" if waiting else ""
    what = "; ".join(part for part in (shown, points) if part) or "the runs other processes are training"
    return f"tune {task} shard {shard[0]}/{shard[1]}: nothing to start, waiting: {what}"


def _lease(task: str, backbone: str, config: TrainConfig) -> str:
    return f"{task} {backbone} {_identity(config)}"


#: The paper's numbers beside ours (Table 1: BERT-large on the GLUE test server, so shapes compare, not values).
PAPER_ROWS = {("sst2", "full fine-tuning"): "sst2_full", ("sst2", "Houlsby r=64"): "sst2_adapters",
              ("cola", "full fine-tuning"): "cola_full", ("cola", "Houlsby r=64"): "cola_adapters"}


def tuned_table(rows: list[dict], task: str) -> str:
    """:func:`tuned_rows` as a text table: each point's selected rate, its trained parameters, its dev mean ±
    sample spread over the seeds stored, and the paper's number where Table 1 has one."""
    from .reference import PAPER

    metric = "MCC" if task == "cola" else "accuracy"
    lines = [f"{'point':<18} {'selected lr':>12} {'trained':>11} {'dev ' + metric + ' ×100 (seeds)':>26} {'paper':>6}"]
    for row in rows:
        rate = "—" if row["rate"] is None else f"{row['rate']:g}" + ("*" if row["tie"] else "") + \
            ("!" if row["at_edge"] else "")
        trained = "—" if row["trained_parameters"] is None else f"{row['trained_parameters']:,}"
        score = (f"{100 * row['mean']:.1f} ± {100 * row['std']:.1f} ({row['n']})" if row["n"] > 1 else
                 f"{100 * row['mean']:.1f} ({row['n']})" if row["n"] == 1 else "not stored")
        paper = PAPER_ROWS.get((task, row["label"]))
        paper = f"{PAPER[paper].value:.1f}" if paper else ""
        lines.append(f"{row['label']:<18} {rate:>12} {trained:>11} {score:>26} {paper:>6}")
    marks = [words for key, words in (("tie", "* chosen on two seeds (a near tie at one)"),
                                      ("at_edge", "! best rate at the grid's edge")) if any(row[key] for row in rows)]
    lines.append("   ".join([*marks, "paper: Table 1, BERT-large, GLUE test"]))  # only the marks the rows carry
    return "\n".join(lines)


#: The two rows every tuned row is read against (the table's two verdict columns).
REFERENCES = ("Houlsby r=64", "full fine-tuning")


def family_pairs(labels) -> list[tuple[str, str]]:
    """The family of verdicts a tuned table draws, as (A, B): the :data:`CLAIMS`, and every row against Houlsby
    r = 64 and against full fine-tuning (its two verdict columns). They are decided together."""
    labels = list(labels)
    pairs = [(a, b) for a, b in CLAIMS if a in labels and b in labels]
    for reference in REFERENCES:
        for label in labels if reference in labels else ():
            if label != reference and (label, reference) not in pairs and (reference, label) not in pairs:
                pairs.append((label, reference))
    return pairs


def tuned_comparisons(rows: list[dict], pairs=None) -> dict:
    """The tuned table's verdicts, decided as one family (:func:`family_pairs`, paired by seed, Holm's procedure:
    :func:`adapterlab.runs.compare.family`), for ``pairs`` (default the :data:`CLAIMS` whose rows are given), or
    None for a pair while either row lacks one of :data:`SEEDS`. The family is the whole table's whatever
    ``pairs`` asks for: asking for fewer verdicts does not make each of them easier to pass."""
    by_label = {row["label"]: row for row in rows}
    verdicts = {}
    for a, b in family_pairs(by_label):
        first, second = by_label[a]["seed_row"], by_label[b]["seed_row"]
        complete = all(set(SEEDS) <= set(row.seeds) for row in (first, second))
        verdicts[a, b] = compare(first, second) if complete else None
    decided = family(verdicts)
    wanted = [(a, b) for a, b in (CLAIMS if pairs is None else pairs) if a in by_label and b in by_label]
    return {pair: decided[pair] if pair in decided else decided.get(pair[::-1]) and decided[pair[::-1]].flipped()
            for pair in wanted}


def tuned_claim_table(rows: list[dict], pairs=None, title: str = "tuned, standard budget") -> VerdictTable:
    """:func:`tuned_comparisons` as a table whose title says the verdicts hold at the standard budget (the
    budget check trains the headline pair longer); a pair not stored yet says so in its row."""
    verdicts = tuned_comparisons(rows, pairs)
    family = "every other row of the tuned table against " + " or ".join(REFERENCES)
    return VerdictTable(tuple(verdicts.values()), tuple(f"{a} vs {b}" for a, b in verdicts), title=title, family=family)


def knee(rows: list[dict]) -> tuple[dict | None, str]:
    """:func:`adapterlab.runs.tradeoff.knee` on :func:`tuned_rows`' rows of increasing size: the row at the knee
    (None where the seeds cannot place it, or while a size lacks one of :data:`SEEDS`) and one line saying why."""
    from .tradeoff import knee as seed_row_knee

    if any(not set(SEEDS) <= set(row["seed_row"].seeds) for row in rows):
        return None, "the knee of r: not stored yet"
    found, line = seed_row_knee([row["seed_row"] for row in rows])
    return next((row for row in rows if row["seed_row"] is found), None), line
