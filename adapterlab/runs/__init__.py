"""Runs: stored results, and the experiments the labs read them from.

* :mod:`.store` — the run store: one JSON record per run, keyed by everything that decides its numbers;
* :mod:`.folder` — the run folder `adapterlab train` writes (metrics.json and the adapter set), locked,
  committed whole or not at all;
* :mod:`.sweep` — a grid of settings × seeds, sharded and resumable;
* :mod:`.tuning` — the fair comparison: each method's rate chosen on validation rows, then 3 seeds (labs 6, 7, 10);
* :mod:`.reference` — the reference settings and the multi-seed rows the labs draw (labs 5-10);
* :mod:`.ablation`, :mod:`.ablation_runs`, :mod:`.ablation_report` — span ablations without retraining (lab 8);
* :mod:`.tradeoff`, :mod:`.peft_map` — accuracy against trained parameters, and the PEFT map (lab 10).
"""
