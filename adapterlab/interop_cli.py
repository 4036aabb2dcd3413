"""The `export` and `import` subcommands (adapterlab.interop does the work)."""

from __future__ import annotations

from .interop import TARGETS


def add_commands(commands) -> None:
    """Add `export` and `import` to the CLI's subparsers."""
    export = commands.add_parser(
        "export", help="write a run's adapter set as a folder AdapterHub (adapters) or PEFT loads",
        description="Houlsby, Pfeiffer and parallel adapters go to AdapterHub (DoubleSeqBn, SeqBn, ParBn; "
                    "model.load_adapter(DIR, use_safetensors=True, set_active=True)), LoRA to PEFT "
                    "(PeftModel.from_pretrained(base, DIR)) or, on query and value only, to AdapterHub's LoRAConfig; "
                    "the classifier head goes with them, safetensors only.")
    export.add_argument("run", metavar="RUN_FOLDER", help="a folder written by `adapterlab train`")
    export.add_argument("--to", required=True, choices=list(TARGETS), help="the library whose format to write")
    export.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder")
    export.add_argument("--name", default=None, help="the adapter's name in AdapterHub (default: the task)")
    export.add_argument("--backbone-tensors", action="store_true",
                        help="AdapterHub: write trained LayerNorms and a trained pooler beside the adapter, in "
                             "trained_backbone.safetensors (AdapterHub's adapters have no place for them)")
    export.add_argument("--overwrite", action="store_true", help="replace what --out holds")
    imp = commands.add_parser(
        "import", help="read an AdapterHub or PEFT folder into an adapter set that `evaluate` loads",
        description="A folder whose adapter computes what no adapterlab method computes is refused, never loaded "
                    "approximately.")
    imp.add_argument("folder", metavar="DIR", help="a folder saved by AdapterHub (save_adapter(..., with_head=True, "
                                                   "use_safetensors=True)) or PEFT (save_pretrained), or exported here")
    imp.add_argument("--out", required=True, metavar="RUN_FOLDER", help="a new or empty folder for the adapter set")
    imp.add_argument("--backbone", default=None, help="default: the base model the folder records")
    imp.add_argument("--task", default=None, help="the task its classifier was trained on (default: what the folder says)")
    imp.add_argument("--overwrite", action="store_true", help="replace what --out holds")


def export_command(args) -> int:
    from .cli import OK, USAGE, CommandError
    from .interop import InteropError, export_set
    from .run_folder import RunFolderError

    try:
        out = export_set(args.run, args.to, args.out, name=args.name, backbone_tensors=args.backbone_tensors,
                         overwrite=args.overwrite)
    except (InteropError, RunFolderError) as error:
        raise CommandError(str(error), USAGE) from None
    load = ("adapters.init(model); model.load_adapter(DIR, use_safetensors=True, set_active=True)"
            if args.to == "adapterhub" else "PeftModel.from_pretrained(base, DIR)")
    print(f"wrote {out}: load it with {load}, DIR = {out}")
    if (out / "trained_backbone.safetensors").is_file():
        print("then load the trained LayerNorms / pooler: model.load_state_dict(safetensors.torch.load_file("
              f"'{out}/trained_backbone.safetensors'), strict=False)")
    return OK


def import_command(args) -> int:
    from .cli import OK, USAGE, CommandError
    from .interop import InteropError, import_set
    from .run_folder import RunFolderError

    try:
        out, summary = import_set(args.folder, args.out, backbone=args.backbone, task=args.task,
                                  overwrite=args.overwrite)
    except (InteropError, RunFolderError) as error:
        raise CommandError(str(error), USAGE) from None
    print(f"imported {summary['kind']} {summary['method']} for {summary['task']} on {summary['backbone']} into {out}: "
          f"adapterlab evaluate --checkpoint {out}")
    return OK


COMMANDS = {"export": export_command, "import": import_command}
