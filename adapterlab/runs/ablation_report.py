"""Lab 8's span ablation over three seeds: read from the run store, put beside the paper and a control.

One seed's ablation on 300 sentences cannot tell a 2-point difference from noise, so lab 8 draws its
conclusions from the stored ablations of the reference runs (:mod:`adapterlab.ablation_runs`, made with
``adapterlab ablate``) and from a control the paper did not run. "All adapters off" is not the pretrained
model: it keeps everything else the adapted run trained (the LayerNorms, the head and, where it trains, the
pooler) and scores it on features without the adapters it was trained with. The control trains exactly those
parts, with no adapters ever (method "layernorm" at the same settings, stored by ``adapterlab sweep``): what
the backbone is worth when everything but the adapters may fit it. Together they separate "the backbone with
its LayerNorms and head is already good" from "the adapters carry the task".

Every claim is computed from the stored numbers (:meth:`StoredAblations.claims`): a claim that one set of
seeds scores above another is decided by the course's one rule (:func:`adapterlab.runs.compare.compare`:
ahead, level or undecided from the 95 % interval of the difference), the others are booleans; a claim that
cannot be computed because runs are missing is None, and :meth:`StoredAblations.missing` names the
commands that make them. Nothing here trains.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from .ablation_runs import (
    AblationSummary,
    ablate_command_line,
    stored_ablations,
    summarize_ablations,
)
from .compare import Comparison, compare, family, margin_of
from .reference import (
    REFERENCE_BACKBONE,
    REFERENCE_CONFIG,
    SEEDS,
    PaperValue,
    SeedRow,
    missing_report,
    seed_rows,
)
from .verdict_table import VerdictTable, decided_table, verdict_words

#: Dev rows each span is scored on: lab 8's ``ablation_eval`` for the stand-in (student profile).
REFERENCE_EVAL_ROWS = 300
#: "Costs little": the paper's largest single-layer drop was 2 points (MNLI), smaller on CoLA.
SINGLE_LAYER_COST = 0.02
#: "About the majority class": the paper's all-off cells were within a point or two of it.
NEAR_MAJORITY = 0.05

#: The control: the method that trains what "all adapters off" keeps trained (LayerNorms, head, the pooler where
#: the settings train it), with no adapters; and how lab 8 names it.
CONTROL_METHOD = "layernorm"
CONTROL_WHAT = "no adapters, the LayerNorms, head and pooler trained"
#: What each claim of :meth:`StoredAblations.claims` says, as lab 8 prints it.
CLAIMS = {
    "one_layer_costs_little": "any one layer's adapters off costs under 2 points",
    "lower_matter_less": "the lower half off scores above the upper half off (the same models, paired by seed)",
    "all_off_near_majority": "every adapter off lands within 5 points of the majority class",
    "all_off_below_control": "the control scores above every adapter off (paired by seed)",
}
#: The claims that compare two sets of seeds, with their two sides: :meth:`StoredAblations.claims` gives each as a
#: :class:`~adapterlab.runs.compare.Comparison` whose side ``a`` is the side the claim says scores higher, so the
#: claim holds exactly when the verdict is "ahead".
COMPARISONS = {"lower_matter_less": ("lower half off", "upper half off"),
               "all_off_below_control": ("the control", "every adapter off")}
#: The shape of the paper's Figure 6 (left and centre), as summarised in the course's paper notes.
PAPER_SHAPE = {
    "one_layer": PaperValue("adapters of any one layer off", "at most a 2-point drop (MNLI), less on CoLA",
                            "paper Fig. 6 left/centre, Section 3.6"),
    "lower_upper": PaperValue("lower layers' adapters off against upper layers'",
                              "layers 0-4 off barely matter; layers 8-11 off cost much more (MNLI)",
                              "paper Fig. 6 left/centre, Section 3.6"),
    "all_off": PaperValue("every adapter off", "the majority class: 37 % on MNLI, 69 % on CoLA",
                          "paper Fig. 6 left/centre, Section 3.6"),
}


@dataclass
class StoredAblations:
    """The stored span ablations of one setting over seeds and the control beside them (lab 8).

    ``summary`` is None unless at least two seeds are stored; ``missing_seeds`` are those not stored.
    ``control`` is the control's row: the best dev metric of :data:`CONTROL_METHOD` at the same settings.
    """

    task: str
    config: object
    seeds: tuple
    eval_rows: int
    backbone: str
    summary: AblationSummary | None
    missing_seeds: tuple
    control: SeedRow

    # -- the numbers the claims compare ------------------------------------------------------------

    def halves(self) -> tuple[np.ndarray, np.ndarray]:
        """Per seed: the score with the lower half of the layers off, and with the upper half off."""
        n = self.summary.scores.shape[1]
        return self.summary.scores[:, 0, n // 2 - 1], self.summary.scores[:, n // 2, n - 1]

    def single_layer_cost(self) -> np.ndarray:
        """Per layer: the mean over seeds of (all on − that layer's adapters off)."""
        diagonal = np.diagonal(self.summary.scores, axis1=1, axis2=2)
        return (self.summary.full[:, None] - diagonal).mean(axis=0)

    def trained_row(self) -> SeedRow:
        """The adapted runs' own best dev metric (all dev rows, like the control), from the stored ablations."""
        values = tuple(self.summary.trained)
        return dataclasses.replace(self.control, label=self.config.method, config=self.config, values=values,
                                   seeds=tuple(self.summary.seeds), missing=self.missing_seeds, diverged=0,
                                   mean=float(np.mean(values)), std=float(np.std(values, ddof=1)))

    # -- the claims --------------------------------------------------------------------------------

    def claims(self) -> dict[str, Comparison | bool | None]:
        """Each claim lab 8 states, from the stored numbers (None: not enough runs stored).

        The claims that one set of seeds scores above another are decided by the course's rule
        (:func:`~adapterlab.runs.compare.compare`, the metric's level margin) and given as the
        :class:`~adapterlab.runs.compare.Comparison`, the side claimed higher first: the claim holds when its
        verdict is "ahead"; "undecided" means three seeds cannot say, "level" or "behind" that it does not hold.

        * ``lower_matter_less``: the lower half off against the upper half off, **paired**: both are the same
          trained model of each seed, scored on the same dev rows, switched off two ways, so the interval is of
          the seeds' own differences (the paper's shape: the lower layers matter less);
        * ``all_off_below_control``: the control against every adapter off, **paired** by seed where the control's
          seeds are the ablations' (a seed fixes the control's data order as it fixes the adapted run's; the
          course pairs whatever shares a seed): the trained LayerNorms and head rely on adapted features.

        The two are one family, decided together by Holm's procedure (:func:`~adapterlab.runs.compare.family`).
        The control trains at the lab's shared recipe, not at a rate tuned for it, so no claim sets the adapted
        model against it: with both tuned (lab 10's protocol) adapters and LayerNorm only are undecided.

        The other two are booleans, not tests between sets of seeds, and say so in their words:

        * ``one_layer_costs_little``: no single layer's adapters off costs SINGLE_LAYER_COST or more on the
          mean over seeds; it places the mean drop against the size the paper reports (at most 2 points), and
          says nothing about whether a drop that small is real;
        * ``all_off_near_majority``: the mean over seeds of every adapter off lands within NEAR_MAJORITY of
          the majority class: where the mean lands against the paper's description, a tolerance and not a
          verdict (the course's rule would need a margin the paper does not give).
        """
        names = tuple(CLAIMS)
        if self.summary is None:
            return dict.fromkeys(names)
        s = self.summary
        margin = margin_of(s.metric)
        lower, upper = self.halves()
        majority = float(s.majority.mean())
        out = {
            "one_layer_costs_little": bool(self.single_layer_cost().max() < SINGLE_LAYER_COST),
            "lower_matter_less": compare(lower, upper, margin, names=COMPARISONS["lower_matter_less"], paired=True),
            "all_off_near_majority": bool(abs(s.all_removed.mean() - majority) < NEAR_MAJORITY),
        }
        control = self.control
        if control.n >= 2:
            shared = tuple(control.seeds) == tuple(s.seeds) and control.n == len(s.seeds)
            out["all_off_below_control"] = compare(control, s.all_removed, margin, paired=shared,
                                                   names=COMPARISONS["all_off_below_control"])
        else:
            out["all_off_below_control"] = None
        decided = family({name: out[name] for name in COMPARISONS})
        return out | decided

    # -- what a lab prints -------------------------------------------------------------------------

    def table(self) -> str:
        """Every cell's mean ± sample sd over the seeds: rows the first layer off, columns the last."""
        s = self.summary
        n = s.scores.shape[1]
        lines = [(f"{s.metric}, mean ± sd over seeds {', '.join(map(str, s.seeds))}; row: first layer off, "
                 f"column: last layer off"), "      " + "".join(f"{j:>14}" for j in range(n))]
        for i in range(n):
            cells = ["" if j < i else f"{s.mean[i, j]:.3f} ± {s.std[i, j]:.3f}" for j in range(n)]
            lines.append(f"{i:>6}" + "".join(f"{c:>14}" for c in cells))
        return "\n".join(lines)

    def beside_the_paper(self) -> str:
        """The paper's shape and ours, one line each, with the control under "all off"."""
        s = self.summary
        lower, upper = self.halves()
        n = s.scores.shape[1]
        cost = self.single_layer_cost()
        ours = {
            "one_layer": f"largest mean drop {cost.max():.3f} (layer {int(cost.argmax())})",
            "lower_upper": f"layers 0-{n // 2 - 1} off {_show(lower)}; layers {n // 2}-{n - 1} off {_show(upper)}",
            "all_off": f"{_show(s.all_removed)} against the majority class {s.majority.mean():.3f}",
        }
        lines = []
        for name, paper in PAPER_SHAPE.items():
            lines += [f"{paper.what}:", f"    {paper.source}: {paper.value}", f"    ours: {ours[name]}"]
        control = (f"{_show(np.array(self.control.values))} (best score on every dev row; the adapted model "
                   f"there: {_show(np.array(self.trained_row().values))})" if self.control.n > 1 else "not stored")
        lines.append(f"    control, {CONTROL_WHAT}: {control}")
        return "\n".join(lines)

    def claim_lines(self, names) -> str:
        """Per named claim, what it says and then: True or False, the course's verdict in the words of
        :meth:`claim_table`'s verdict column (the claim holds when the side it names first is ahead), or "not
        stored" (lab 8's checked cells)."""
        claims = self.claims()
        lines = []
        for name in names:
            claim = claims[name]
            if claim is None:
                lines.append(f"{CLAIMS[name]}: not stored")
            else:
                lines.append(f"{CLAIMS[name]}: {verdict_words(claim) if isinstance(claim, Comparison) else claim}")
        return "\n".join(lines)

    def claim_table(self, names) -> VerdictTable:
        """The named claims that compare seeds, one row each, as the course shows every verdict: difference,
        95 % interval, verdict, seeds (and the seeds that would settle an undecided one); "not stored yet" while
        their runs are missing. The two are one family: the footer says so when the table shows one."""
        chosen = [name for name in names if name in COMPARISONS]
        claims = self.claims()
        return decided_table([claims[name] for name in chosen],
                             labels=[" vs ".join(COMPARISONS[name]) for name in chosen],
                             family="the lab's claims that compare seeds")

    def missing(self) -> str:
        """What is not stored, with the commands that make it; empty when everything is."""
        lines = []
        if self.missing_seeds:
            seeds, missing = (", ".join(map(str, seeds)) for seeds in (self.seeds, self.missing_seeds))
            lines.append(f"span ablations of seeds {seeds}: seed {missing} not stored; to make them (stored seeds "
                         "are skipped):")
            lines.append("  " + ablate_command_line(self.task, self.config, self.seeds, self.eval_rows,
                                                    backbone=self.backbone))
        if self.control.missing:
            lines += ["control: " + line for line in missing_report(self.task, [self.control],
                                                                    self.backbone).splitlines()]
        return "\n".join(lines)


def _show(values: np.ndarray) -> str:
    return f"{values.mean():.3f} ± {values.std(ddof=1):.3f}"


def read_stored_ablations(task: str = "sst2", config=REFERENCE_CONFIG, seeds=SEEDS,
                          eval_rows: int = REFERENCE_EVAL_ROWS, *, backbone: str = REFERENCE_BACKBONE,
                          stores=None, **load_args) -> StoredAblations:
    """The stored span ablations of ``config`` at ``seeds`` and the control beside them (lab 8).

    The defaults are the reference settings (:data:`adapterlab.experiments.REFERENCE_CONFIG`, the stand-in,
    the full data, 300 dev rows per span); ``load_args`` are :func:`adapterlab.runstore.key_for`'s. Trains
    nothing: what is missing is reported by :meth:`StoredAblations.missing`.
    """
    seeds = tuple(seeds)
    records = stored_ablations(task, config, seeds, eval_rows, backbone=backbone, stores=stores, **load_args)
    found = [record for record in records if record is not None]
    summary = summarize_ablations(found) if len(found) > 1 else None
    control = seed_rows(task, config, {"control": dataclasses.replace(config, method=CONTROL_METHOD)}, seeds=seeds,
                        backbone=backbone, stores=stores, **load_args)[0]
    return StoredAblations(task, config, seeds, eval_rows, backbone, summary,
                           tuple(seed for seed, record in zip(seeds, records) if record is None), control)
