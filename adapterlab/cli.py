"""`adapterlab ...` / `python -m adapterlab ...`: the command line.

Each subcommand only parses its arguments here and calls the module that does the work.
"""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="adapterlab", description="A teaching lab on bottleneck adapters.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    commands.add_parser("doctor", help="check the installation, backbones and data")

    count = commands.add_parser("count", help="parameter counts: closed form beside the real model")
    count.add_argument("--backbone", default="bert-base", help="bert-base, bert-large, or a backbone name")
    count.add_argument("--placement", default="houlsby", help="houlsby, pfeiffer or parallel")
    count.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r")
    count.add_argument("--frozen-layernorm", action="store_true", help="count LayerNorms as frozen")
    count.add_argument("--num-labels", type=int, default=2)
    count.add_argument("--json", action="store_true", help="machine-readable output")

    train = commands.add_parser("train", help="train one method on a GLUE task; write the adapter set and metrics.json")
    train.add_argument("--task", default="sst2", help="sst2, cola, mrpc or rte")
    train.add_argument("--method", default="houlsby",
                       choices=["houlsby", "pfeiffer", "parallel", "full", "head", "layernorm", "top_k"])
    train.add_argument("--bottleneck", type=int, default=64, help="bottleneck size r (adapter methods)")
    train.add_argument("--top-k", type=int, default=2, help="layers trained by --method top_k")
    train.add_argument("--backbone", default="bert-base-uncased",
                       help="bert-base-uncased (offline: the stand-in), all-MiniLM-L6-v2, bert-base-random, tiny-random")
    train.add_argument("--data", default=None, metavar="DIR",
                       help="a GLUE folder (default: $ADAPTERLAB_DATA, then the hub, then the toy sets)")
    train.add_argument("--max-train", type=int, default=None, metavar="N", help="a seeded, stratified subset of N rows")
    train.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")
    train.add_argument("--epochs", type=float, default=1.0)
    train.add_argument("--lr", type=float, default=None,
                       help="peak learning rate (default: 1e-3 for adapters, layernorm, head; 5e-5 for full, top_k)")
    train.add_argument("--batch-size", type=int, default=32)
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--out", required=True, metavar="DIR", help="folder for the adapter set and metrics.json")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")

    evaluate = commands.add_parser("evaluate", help="evaluate a saved adapter set on a task's dev set")
    evaluate.add_argument("--checkpoint", required=True, metavar="DIR", help="a folder written by `adapterlab train`")
    evaluate.add_argument("--task", default=None, help="default: the task the adapter set was trained on")
    evaluate.add_argument("--data", default=None, metavar="DIR", help="a GLUE folder (as for train)")
    evaluate.add_argument("--backbone", default=None, help="default: the backbone the adapter set was trained on")
    evaluate.add_argument("--max-eval", type=int, default=None, metavar="N", help="evaluate on N dev rows")

    slides = commands.add_parser("slides", help="export the labs to reveal.js slide decks that open offline")
    slides.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    slides.add_argument("--out", default="build/slides", help="folder for the decks (default: build/slides)")

    student = commands.add_parser("student", help="write student copies of the labs, solutions stubbed out")
    student.add_argument("labs", nargs="*", metavar="LAB", help="lab number, name or notebook path (default: every lab)")
    student.add_argument("--out", default="build/student", help="folder for the copies (default: build/student)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from .doctor import run_doctor

        return run_doctor()
    if args.command == "count":
        from .counting import count_command

        return count_command(args)
    if args.command == "train":
        from .training import train_command

        return train_command(args)
    if args.command == "evaluate":
        from .training import evaluate_command

        return evaluate_command(args)
    if args.command == "slides":
        from .slides import slides_command

        return slides_command(args)
    if args.command == "student":
        from .student import student_command

        return student_command(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
