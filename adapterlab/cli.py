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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "doctor":
        from .doctor import run_doctor

        return run_doctor()
    if args.command == "count":
        from .counting import count_command

        return count_command(args)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
