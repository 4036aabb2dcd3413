"""Run profiles: how big every lab runs, chosen once by the ``ADAPTERLAB_PROFILE`` environment variable.

* ``student`` (the default) — the real thing on a laptop: bert-base-uncased (or, when it cannot be
  had, the offline stand-in, with a notice), the real GLUE data, sweeps dense enough to read a curve
  from. Every training cell stays within about 5 minutes on a 4-core laptop. A training step of
  bert-base costs five to seven of the stand-in (``benchmarks/speed.py``: 28 vs 147 examples/s for
  Houlsby adapters, 18 vs 120 for full fine-tuning, on 2 cores), so the sizes are chosen for the
  backbone that will load: :func:`current_profile` asks
  :func:`adapterlab.backbones.expected_backbone` first, and the stand-in gets longer runs
  (``standin_sizes``) in the same minutes.
* ``ci`` — the same notebooks, small enough that the whole labs suite runs in minutes on 2 cores:
  the offline stand-in, a few hundred examples, coarse sweeps. The facts the labs check (shapes,
  counts, identity errors) do not depend on the profile; only measured curves and timings do.

A profile is a frozen dataclass of plain values, so a notebook reads ``profile.steps`` and nothing
else decides how big a run is. To add a setting for a new lab, add a field with a value in both
profiles below.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from dataclasses import dataclass

from ...training.backbones import BERT_BASE, BERT_BASE_RANDOM, STANDIN, expected_backbone

PROFILE_ENV = "ADAPTERLAB_PROFILE"
DEFAULT_PROFILE = "student"


@dataclass(frozen=True)
class Profile:
    """Every size a lab may depend on. ``seed`` seeds everything random in the labs."""

    name: str
    description: str
    #: What load_backbone is asked for, and whether it may fall back to the offline stand-in.
    backbone: str
    fallback: bool
    #: Examples per split (None: all of them) and the batches they are cut into.
    max_train: int | None
    max_eval: int | None
    batch_size: int
    #: Training steps per run (the training labs). ``benchmarks/lab_budget.py`` checks that every
    #: training cell fits its minutes with bert-base.
    steps: int
    #: Sentences fed through a whole model when a lab measures it (near-identity, timing).
    probe_sentences: int
    #: Init scales swept on a whole model (lab 2), log-spaced from 1e-7 to 1.
    init_scale_points: int
    #: Repeats of a timed forward pass; the median is reported.
    timing_repeats: int
    #: Evaluations on the dev set during a training lab's run: every ``eval_every`` steps and at the
    #: end. With bert-base-uncased one evaluation of SST-2's dev set costs as much as ~20 steps.
    eval_every: int
    #: Steps of each run in the placement sweep (lab 6) and the training panel's default. (CoLA
    #: needs more: its sweeps in lab 7 train ``steps`` per run.)
    sweep_steps: int
    panel_steps: int
    #: How often the panel evaluates; None: halfway and at the end. Lab 7 trains its first run with
    #: eval_every = steps // 2 so that the panel's sweeps can reuse it: keep the two equal.
    panel_eval_every: int | None
    #: Init scales and bottleneck sizes the CoLA sweeps train at (lab 7, paper Fig. 6 right); both
    #: sweeps reuse the lab's r = 64, σ = 1e-2 run, and each of its sweep cells trains two runs.
    sweep_init_scales: tuple[float, ...]
    sweep_bottlenecks: tuple[int, ...]
    #: Dev examples scored per span in the span ablation (lab 8): L(L+1)/2 + 1 evaluations.
    ablation_eval: int
    #: The backbone the serving lab times (lab 9); speed does not depend on the weights.
    latency_backbone: str
    #: Whether the training labs train the pretrained pooler. BERT's pooler was trained (next-sentence
    #: prediction) and adapter-bert leaves it frozen, as the package does by default; the stand-in pools by
    #: the mean, its pooler was never trained to summarise a sentence, and frozen it starves the classifier
    #: (lab 5 shows it from the reference runs), so the stand-in's sizes train it.
    train_pooler: bool
    seed: int = 0
    #: Sizes that replace the ones above when ``backbone`` cannot be had and the stand-in loads
    #: instead (field name, value); empty when the sizes above are already the stand-in's.
    standin_sizes: tuple[tuple[str, object], ...] = ()
    #: The backbone the training sizes are meant for: ``backbone``, or the stand-in after
    #: :meth:`for_backbone` swapped ``standin_sizes`` in.
    sized_for: str = ""

    def __post_init__(self):
        if not self.sized_for:
            object.__setattr__(self, "sized_for", self.backbone)

    def for_backbone(self, loaded: str) -> "Profile":
        """This profile with the training sizes for ``loaded``, the backbone that will actually load."""
        if loaded == STANDIN and self.sized_for != STANDIN and self.standin_sizes:
            return dataclasses.replace(self, **dict(self.standin_sizes), standin_sizes=(), sized_for=STANDIN)
        return self

    def as_rows(self) -> list[tuple[str, str]]:
        """(field, value) pairs, for a table in a notebook (the stand-in's sizes are a variant: see
        :func:`variants`)."""
        return [(field.name, _show(getattr(self, field.name))) for field in dataclasses.fields(self)
                if field.name != "standin_sizes"]


def _show(value) -> str:
    if value is None:
        return "all"
    if isinstance(value, tuple):
        return ", ".join(str(v) for v in value)
    return str(value)


PROFILES: dict[str, Profile] = {
    "student": Profile(
        name="student",
        description="full size for a laptop: bert-base-uncased (or the offline stand-in), real data",
        backbone=BERT_BASE,
        fallback=True,
        max_train=None,
        max_eval=None,
        batch_size=32,
        steps=100,
        probe_sentences=32,
        init_scale_points=15,
        timing_repeats=10,
        eval_every=50,
        sweep_steps=30,
        panel_steps=50,
        panel_eval_every=50,
        sweep_init_scales=(1e-6, 1e-4, 1e-2, 1e-1, 1.0),
        sweep_bottlenecks=(8, 256),
        ablation_eval=96,
        latency_backbone=BERT_BASE_RANDOM,
        train_pooler=False,
        standin_sizes=(("steps", 300), ("eval_every", 150), ("sweep_steps", 100), ("panel_steps", 100),
                       ("panel_eval_every", None), ("sweep_bottlenecks", (2, 8, 32, 256)), ("ablation_eval", 300),
                       ("train_pooler", True)),
    ),
    "ci": Profile(
        name="ci",
        description="fast and small for automated tests: the offline stand-in, a few hundred examples",
        backbone=STANDIN,
        fallback=True,
        max_train=512,
        max_eval=256,
        batch_size=16,
        steps=20,
        probe_sentences=8,
        init_scale_points=8,
        timing_repeats=3,
        eval_every=10,
        sweep_steps=6,
        panel_steps=10,
        panel_eval_every=None,
        sweep_init_scales=(1e-4, 1e-2, 1.0),
        sweep_bottlenecks=(8,),
        ablation_eval=64,
        latency_backbone=STANDIN,
        train_pooler=True,
    ),
}


def get_profile(name: str) -> Profile:
    """The profile called ``name``; a ValueError naming the choices for anything else."""
    if name not in PROFILES:
        raise ValueError(
            f"unknown profile {name!r}: {PROFILE_ENV} must be one of {', '.join(PROFILES)} "
            f"(unset means {DEFAULT_PROFILE!r})"
        )
    return PROFILES[name]


def current_profile() -> Profile:
    """The profile named by ``$ADAPTERLAB_PROFILE`` (unset or empty: ``student``), with its training
    sizes for the backbone that will load (asked once per process: offline, the hub probe takes a
    couple of seconds)."""
    name = os.environ.get(PROFILE_ENV, "").strip().lower() or DEFAULT_PROFILE
    profile = get_profile(name)
    return profile.for_backbone(_expected_backbone(profile.backbone, profile.fallback))


@functools.lru_cache(maxsize=None)
def _expected_backbone(name: str, fallback: bool) -> str:
    return expected_backbone(name, fallback)


def variants() -> dict[str, Profile]:
    """Every profile as it can run: the student profile sized for bert-base-uncased and for the stand-in."""
    out = {}
    for name, profile in PROFILES.items():
        out[f"{name} ({profile.sized_for})"] = profile
        if profile.standin_sizes:
            out[f"{name} ({STANDIN})"] = profile.for_backbone(STANDIN)
    return out


def init_scales(profile: Profile) -> list[float]:
    """The profile's init-scale grid: log-spaced from 1e-7 to 1, always holding 1e-3 and 1e-2."""
    n = profile.init_scale_points
    grid = {round(10 ** (-7 + 7 * i / (n - 1)), 12) for i in range(n)} | {1e-3, 1e-2}
    return sorted(grid)
