"""A training setting declared once: its name, default, help text, check, command-line flag and run-key rule.

:class:`adapterlab.training.TrainConfig` is built from these declarations (the general ones in
:mod:`adapterlab.training.config`, each method's own in its module under :mod:`adapterlab.methods`), and so
is every command-line flag that sets one, on every subcommand that trains, and every command line the
package prints for a run it does not find. A setting therefore has one name everywhere: the config field
``lora_rank`` is the flag ``--lora-rank``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Callable

_UNSET = object()


@dataclass(frozen=True)
class Setting:
    """One training setting.

    ``kind`` is int, float, str or bool; ``optional`` allows None (its meaning is in ``help``). ``check``
    refuses a bad value with a ValueError that names the setting. ``flag`` is the command-line spelling
    when it is not ``--name-with-dashes`` (``aliases`` are older spellings that still work).
    ``in_key=False``: the setting does not change a run's numbers (the progress bar, the device), so it is
    not part of a stored run's key. ``key_when_default=False``: a setting added after runs were stored; a
    run's key holds it only when it is not at its default, so every older run keeps its key.
    """

    name: str
    default: object
    help: str
    kind: type
    check: Callable[[str, object], object] | None = None
    choices: tuple | Callable[[], tuple] | None = None
    optional: bool = False
    flag: str | None = None
    aliases: tuple[str, ...] = ()
    in_key: bool = True
    key_when_default: bool = True
    metavar: str | None = None

    @property
    def flags(self) -> tuple[str, ...]:
        """The command-line spellings, the one printed first. A bool that defaults to True is switched off."""
        dashed = self.name.replace("_", "-")
        primary = self.flag or (f"--no-{dashed}" if self.kind is bool and self.default is True else f"--{dashed}")
        return (primary, *self.aliases)

    def allowed(self) -> tuple | None:
        return self.choices() if callable(self.choices) else self.choices

    def validate(self, value):
        """The value in its plain form, or a ValueError naming the setting and what it must be."""
        if value is None and self.optional:
            return None
        if self.kind is bool:
            if not isinstance(value, bool):
                raise ValueError(f"{self.name} must be True or False; got {value!r}")
        elif self.kind is str and not isinstance(value, str):
            raise ValueError(f"{self.name} must be a string; got {value!r}")
        choices = self.allowed()
        if choices is not None and value not in choices:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, choices))}; got {value!r}")
        return self.check(self.name, value) if self.check is not None else value

    def parse(self, text: str):
        """A value from its command-line text (the flag's or a sweep grid's), checked."""
        if self.optional and text.lower() == "none":
            return None
        try:
            if self.kind is bool:
                lowered = text.lower()
                if lowered not in ("true", "false"):
                    raise ValueError
                value = lowered == "true"
            elif self.kind is int:
                value = int(text)
            elif self.kind is float:
                value = float(text)
            else:
                value = text
        except ValueError:
            raise ValueError(f"{self.name} must be {self._kind_text()}; got {text!r}") from None
        return self.validate(value)

    def _kind_text(self) -> str:
        return {bool: "true or false", int: "an integer", float: "a number"}.get(self.kind, "a string") + \
            (" (or none)" if self.optional else "")

    def add_to(self, parser: argparse.ArgumentParser, default=_UNSET) -> None:
        """Add this setting's flag to ``parser`` (``default`` replaces the declared one for this command)."""
        default = self.default if default is _UNSET else default
        if self.kind is bool:
            switched_off = self.default is True  # the flag is --no-..., so its help says what it turns off
            parser.add_argument(*self.flags, dest=self.name, action="store_false" if switched_off else "store_true",
                                default=default, help=f"do not {self.help} (default: on)" if switched_off else self.help)
            return
        parser.add_argument(*self.flags, dest=self.name, type=self._argument, default=default, choices=self.allowed(),
                            metavar=None if self.allowed() else (self.metavar or self.name.upper()),
                            help=self._help(default))

    def _argument(self, text: str):
        """``parse`` for argparse, whose one-line error then carries this setting's own message."""
        try:
            return self.parse(text)
        except ValueError as error:  # named by its flag, as the command line spells it
            message = str(error)
            if self.flags[0] == f"--{self.name}" and message.startswith(f"{self.name} "):
                message = self.flags[0] + message[len(self.name):]
            raise argparse.ArgumentTypeError(message) from None

    def _help(self, default) -> str:
        text = self.help if default is None else f"{self.help} (default: {default})"
        return text.replace("%", "%%")

    def command_line(self, value) -> list[str]:
        """The arguments that set this setting to ``value`` (none when it is the default)."""
        if value == self.default:
            return []
        if self.kind is bool:
            return [self.flags[0]]
        return [self.flags[0], _show(value)]


def _show(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
