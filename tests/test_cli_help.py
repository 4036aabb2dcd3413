"""Command-line help that says what each flag does, and the one line `evaluate` prints for people."""

from __future__ import annotations

import argparse

from adapterlab import cli


def _flags():
    """(command, flag, help) for every option of every subcommand."""
    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for command, sub in commands.choices.items():
        for action in sub._actions:
            for flag in action.option_strings:
                yield command, flag, action.help or ""


def test_every_no_flag_s_help_says_what_it_turns_off():
    switched_off = [(command, flag, text) for command, flag, text in _flags() if flag.startswith("--no-")]
    assert {flag for _, flag, _ in switched_off} >= {"--no-progress", "--no-train-layernorm"}
    for command, flag, text in switched_off:
        assert text.startswith("do not "), (command, flag, text)


def test_evaluate_prints_the_main_metric_and_the_rows_for_people(tmp_path, capsys, monkeypatch):
    import json

    from adapterlab.backbones import TINY, load_backbone
    from adapterlab.checkpoints import save_adapter_set
    from adapterlab.placement import apply_method

    monkeypatch.delenv("ADAPTERLAB_DATA", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model, _, info = load_backbone(TINY, num_labels=2, seed=0)
    apply_method(model, "houlsby", bottleneck=2)
    run = save_adapter_set(model, tmp_path / "run", backbone=info, extra={"task": "sst2", "seed": 0})
    assert cli.main(["evaluate", "--checkpoint", str(run), "--max-eval", "24"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert lines[-2] == f"accuracy {result['metrics']['accuracy']:.4f} on 24 dev rows"


def test_a_flag_s_help_lists_only_values_its_choices_accept():
    """A help that lists a flag's values after a colon ("houlsby (…), zero_up (…), bert") names each of its
    choices and nothing argparse would refuse."""
    import re

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    listed = 0
    for command, sub in commands.choices.items():
        for action in sub._actions:
            if not action.choices or ":" not in re.sub(r"\([^)]*\)", "", action.help or ""):
                continue
            named = re.sub(r"\([^)]*\)", "", action.help).split(":", 1)[1]
            named = re.sub(r"\s*\(default:.*", "", named)
            values = [word.strip() for word in named.split(",") if word.strip()]
            if not all(re.fullmatch(r"[\w-]+", value) for value in values):
                continue  # prose after the colon, not a list of values
            listed += 1
            assert set(values) == {str(choice) for choice in action.choices}, (command, action.option_strings, values)
    assert listed >= 1
