"""The labs' multi-seed experiments: what the run store holds for a setting swept over three seeds.

A lab's conclusion needs more than one run: two settings whose single runs differ may not differ at all
once the seed changes the batches and the initial weights. Labs 6–9 therefore draw their figures from
stored runs (:mod:`adapterlab.runstore`) made with one set of *reference settings*
(:data:`REFERENCE_CONFIG`) and the seeds :data:`SEEDS`, and state a conclusion only with a verdict
computed from those runs by the course's rule (:func:`adapterlab.runs.compare.compare`).

Nothing here trains. A run that is not stored is named, with the ``python -m adapterlab sweep`` command
that makes it (:func:`missing_report`), and the row is drawn from the seeds that are stored.

The shipped reference runs (``data/reference_runs``) were made on the offline stand-in backbone; a
student with bert-base-uncased reads their own store first (:func:`lab_rows`) and, while it is empty,
sees the stand-in's reference runs labelled as the stand-in's.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from ..training.backbones import BERT_BASE, STANDIN, expected_backbone
from .store import stored_runs, summarize
from ..training import TrainConfig
from ..training.config import command_line, settings

#: The settings every reference run shares (data/reference_runs/README.md): Houlsby adapters, r = 64,
#: σ = 1e-2, 300 steps of batch 32, the method's default peak learning rate (1e-3 for adapters, 5e-5 for
#: full fine-tuning), evaluated at steps 150 and 300, float32; the full train and dev sets. The pooler
#: trains (``train_pooler=True``, not the package default): the stand-in is a sentence-transformer that pools
#: by the mean, so its [CLS] pooler was never trained to summarise a sentence, and frozen it starves the
#: classifier (the reference runs hold both: with the pooler frozen, every CoLA run of the init-scale
#: sweep stays at the majority class, MCC 0, and head-only SST-2 is near it). BERT's own pooler was
#: trained (next-sentence prediction), which is why adapter-bert can leave it frozen.
REFERENCE_CONFIG = TrainConfig(method="houlsby", bottleneck=64, init_scale=1e-2, max_steps=300, batch_size=32,
                               eval_every=150, precision="fp32", train_pooler=True, progress=False)
#: The seeds of every reference setting.
SEEDS = (0, 1, 2)
#: The backbone the shipped reference runs were made on.
REFERENCE_BACKBONE = STANDIN


@dataclass(frozen=True)
class SeedRow:
    """One setting over the seeds: the stored runs' best metrics (``values``, in seed order), their mean
    and sample standard deviation (NaN with fewer than 2 values), the seeds found and missing, and how
    many stored runs diverged (they have no metric and are left out of the mean)."""

    label: object
    config: TrainConfig
    metric: str | None
    values: tuple[float, ...]
    seeds: tuple[int, ...]
    missing: tuple[int, ...]
    diverged: int
    mean: float
    std: float

    @property
    def n(self) -> int:
        """How many runs have a metric (diverged and missing runs do not)."""
        return len(self.values)

    def describe(self, digits: int = 3) -> str:
        """``mean ± std (n seeds)``, naming diverged and missing runs: one line of a lab's table."""
        if self.n == 0:
            text = "no run with a metric"
        elif self.n == 1:
            text = f"{self.mean:+.{digits}f} (1 seed: no spread)"
        else:
            text = f"{self.mean:+.{digits}f} ± {self.std:.{digits}f} ({self.n} seeds)"
        if self.diverged:
            text += f", {self.diverged} diverged"
        if self.missing:
            text += f", seed {', '.join(map(str, self.missing))} not stored"
        return text


def training_backbone(profile) -> str:
    """The backbone a profile's runs are made on (bert-base-uncased, or the stand-in where it cannot be had)."""
    return expected_backbone(profile.backbone, profile.fallback)


def _configs(base: TrainConfig, setting, values) -> dict:
    if isinstance(setting, dict):
        if values is not None:
            raise ValueError("give either a setting name and its values or a dict label -> config, not both")
        return dict(setting)
    if not isinstance(setting, str) or values is None:
        raise ValueError("name a TrainConfig setting and its values, e.g. seed_rows('cola', REFERENCE_CONFIG, "
                         "'init_scale', [1e-4, 1e-2]), or give a dict label -> TrainConfig")
    names = {field.name for field in dataclasses.fields(TrainConfig)}
    if setting not in names or setting == "seed":
        raise ValueError(f"{setting!r} is not a TrainConfig setting a sweep can vary; one of "
                         f"{', '.join(sorted(names - {'seed', 'progress', 'device'}))}")
    return {value: dataclasses.replace(base, **{setting: value}) for value in values}


def seed_rows(task: str, base: TrainConfig = REFERENCE_CONFIG, setting=None, values=None, *, seeds=SEEDS,
              backbone: str = REFERENCE_BACKBONE, fallback: bool = True, data_dir=None, max_train=None,
              max_eval=None, stores=None) -> list[SeedRow]:
    """One :class:`SeedRow` per value of ``setting`` (``base`` with that setting changed), or per entry of a
    dict label → TrainConfig given as ``setting``, from the stored runs of every seed. Trains nothing.

    ``backbone``, ``fallback``, ``data_dir``, ``max_train``, ``max_eval`` and ``stores`` are those of
    :func:`adapterlab.runstore.stored_runs`; the defaults read the reference runs (full data, the stand-in).
    Labs 6 and 7 draw their figures and booleans from these rows.
    """
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("seeds is empty: give the seeds to read, e.g. SEEDS = (0, 1, 2)")
    rows = []
    for label, config in _configs(base, setting, values).items():
        per_seed = [dataclasses.replace(config, seed=seed, progress=False) for seed in seeds]
        records = stored_runs(task, per_seed, backbone=backbone, fallback=fallback, data_dir=data_dir,
                              max_train=max_train, max_eval=max_eval, stores=stores)
        rows.append(seed_row(label, config, seeds, records))
    return rows


def seed_row(label, config: TrainConfig, seeds, records) -> SeedRow:
    """The :class:`SeedRow` of one setting from its stored ``records`` (one per seed of ``seeds``, None where
    that seed is not stored): how :func:`seed_rows` and the tuned comparison (:mod:`.tuning`) read runs."""
    found = [record for record in records if record is not None]
    summary = summarize(found, by=())
    row = summary[0] if summary else {"values": [], "mean": math.nan, "std": math.nan, "diverged": 0}
    return SeedRow(
        label=label, config=dataclasses.replace(config, seed=seeds[0], progress=False),
        metric=found[0]["metric"] if found else None, values=tuple(row["values"]),
        seeds=tuple(sorted(r["key"]["settings"]["seed"] for r in found)),
        missing=tuple(seed for seed, record in zip(seeds, records) if record is None),
        diverged=row["diverged"], mean=row["mean"], std=row["std"])


@dataclass(frozen=True)
class LabRows:
    """What a lab shows for one experiment: the rows, the backbone their runs were made on, and a line
    saying whose runs they are (and, for a student whose own store is empty, how to make their own)."""

    task: str
    rows: list
    backbone: str
    note: str

    def missing(self) -> str:
        """What is not stored and the command that makes it (:func:`missing_report`)."""
        return missing_report(self.task, self.rows, self.backbone)


def lab_rows(task: str, base: TrainConfig = REFERENCE_CONFIG, setting=None, values=None, *, profile,
             seeds=SEEDS, stores=None) -> LabRows:
    """The rows a lab draws (labs 6 and 7): from the runs of the backbone ``profile`` trains (reference
    settings, full data, whatever the profile's sizes); where that is bert-base-uncased and none of its
    runs is stored yet, the stand-in's reference runs, labelled as the stand-in's, with the command that
    makes the student's own."""
    backbone = training_backbone(profile)
    rows = seed_rows(task, base, setting, values, seeds=seeds, backbone=backbone, fallback=False, stores=stores)
    if backbone == REFERENCE_BACKBONE:
        return LabRows(task, rows, backbone, f"runs on {backbone} (the offline stand-in for bert-base-uncased), "
                                       f"seeds {', '.join(map(str, seeds))}")
    if any(row.seeds for row in rows):
        return LabRows(task, rows, backbone, f"your own runs on {backbone}, seeds {', '.join(map(str, seeds))}")
    reference = seed_rows(task, base, setting, values, seeds=seeds, backbone=REFERENCE_BACKBONE, stores=stores)
    fill = missing_report(task, rows, backbone).splitlines()[-1]
    return LabRows(task, reference, REFERENCE_BACKBONE,
                   f"no runs of yours on {backbone} are stored yet: shown are the reference runs on the stand-in "
                   f"{REFERENCE_BACKBONE}, not {backbone}; {fill}")


# --------------------------------------------------------------------------------------------------
# What is missing, and the command that makes it
# --------------------------------------------------------------------------------------------------

def sweep_command(task: str, configs: list[TrainConfig], seeds, backbone: str = REFERENCE_BACKBONE) -> str:
    """The ``python -m adapterlab sweep`` command that trains ``configs`` × ``seeds`` into the run store.

    The configs may differ in one setting (it becomes the --grid option); runs already stored are not
    trained again, so the command may name a few that are. Flags come from the declared settings."""
    if not configs:
        raise ValueError("no configs: give the TrainConfigs whose runs are missing")
    declared = settings()
    names = [name for name in declared if name not in ("seed", "progress", "device")]
    shown = lambda config, name: declared[name].command_line(getattr(config, name)) or ["default"]  # noqa: E731
    varying = [name for name in names if len({tuple(shown(c, name)) for c in configs}) > 1]
    if len(varying) > 1:
        raise ValueError(f"the configs differ in {', '.join(varying)}: one sweep command varies one setting; "
                         "give the configs of each command separately")
    parts = ["python -m adapterlab sweep", f"--task {task}",
             *command_line(configs[0], skip=("seed", "progress", "device", *varying), defaults={"precision": "fp32"})]
    for name in varying:
        values = list(dict.fromkeys(_grid_value(getattr(c, name)) for c in configs))
        parts.append(f"--grid {name}={','.join(values)}")
    parts.append(f"--seeds {','.join(str(s) for s in sorted(set(seeds)))}")
    if backbone != BERT_BASE:
        parts.append(f"--backbone {backbone}")
    return " ".join(parts)


def _grid_value(value) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else \
        f"{value:g}" if isinstance(value, float) else str(value)


def missing_report(task: str, rows: list[SeedRow], backbone: str = REFERENCE_BACKBONE) -> str:
    """One line per setting with missing seeds and the command that fills them; or that all are stored."""
    lacking = [row for row in rows if row.missing]
    stored = sum(len(row.seeds) for row in rows)
    if not lacking:
        return f"all {stored} runs stored ({len(rows)} settings × their seeds)"
    lines = [f"{stored} runs stored; missing: " + "; ".join(f"{row.label}: seed {', '.join(map(str, row.missing))}"
                                                        for row in lacking)]
    seeds = sorted({seed for row in lacking for seed in row.missing})
    try:
        lines.append("to fill them: " + sweep_command(task, [row.config for row in lacking], seeds, backbone))
    except ValueError:
        for row in lacking:
            lines.append(f"to fill {row.label}: " + sweep_command(task, [row.config], row.missing, backbone))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------------
# The booleans a conclusion needs
# --------------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------------
# The paper's values, put beside ours
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PaperValue:
    """A number or a shape the paper reports, with where it says so."""

    what: str
    value: object
    source: str


#: Houlsby et al. (2019), as summarised in the course's paper notes (seeds/houlsby-2019-paper-notes.txt).
#: GLUE scores are ×100 (CoLA: Matthews correlation; SST-2: accuracy), on the test server, BERT-large.
PAPER = {
    "cola_full": PaperValue("CoLA, BERT-large fully fine-tuned: Matthews correlation ×100", 60.5, "paper Table 1"),
    "cola_adapters": PaperValue("CoLA, BERT-large with adapters: Matthews correlation ×100", 59.5, "paper Table 1"),
    "sst2_full": PaperValue("SST-2, BERT-large fully fine-tuned: accuracy %", 94.9, "paper Table 1"),
    "sst2_adapters": PaperValue("SST-2, BERT-large with adapters: accuracy %", 94.0, "paper Table 1"),
    "glue_full": PaperValue("GLUE mean, BERT-large fully fine-tuned", 80.4, "paper Table 1"),
    "glue_adapters": PaperValue("GLUE mean, BERT-large with adapters (r per task from 8, 64, 256)", 80.0,
                                "paper Table 1"),
    "init_scale": PaperValue("adapter performance vs init std σ (1e-7 … 1) on MNLI-m and CoLA",
                             "robust (flat) up to σ = 1e-2; degrades for larger σ, more substantially on CoLA",
                             "paper Fig. 6 right, Section 3.6"),
    "bottleneck": PaperValue("adapter size r chosen per GLUE task", "from {8, 64, 256}: 256 for MNLI, 8 for RTE",
                             "paper Section 3.2, Table 1"),
    "mnli_top_layer": PaperValue("MNLI-m, BERT-base: accuracy %, fine-tuning the top layer (~9M parameters)", 77.8,
                                 "paper Fig. 4"),
    "mnli_adapters": PaperValue("MNLI-m, BERT-base: accuracy %, adapters r = 64 (~2M parameters)", 83.7,
                                "paper Fig. 4"),
    "mnli_full": PaperValue("MNLI-m, BERT-base: accuracy %, full fine-tuning", 84.4, "paper Fig. 4"),
}
