"""The commands reference: every `llmgw` command, from the command tree typer builds of the CLI."""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import typer
import typer.main

from docsgen import md

# Shown once at the top rather than in every command's table.
_COMMON = {"help"}


@dataclass(frozen=True)
class Command:
    """One command of the tree, with the context its help is rendered in."""

    path: str  # "llmgw ctl model add"
    command: Any  # typer's command (its own copy of click's classes)
    context: Any

    @property
    def ident(self) -> str:
        """The id of the command's heading."""
        return md.anchor(self.path)

    @property
    def subcommands(self) -> dict[str, Any]:
        """A group's commands by name, in the order its help lists them; {} for a command."""
        if not hasattr(self.command, "list_commands"):
            return {}
        names = self.command.list_commands(self.context)
        return {name: self.command.get_command(self.context, name) for name in names}


def walk(app: typer.Typer, name: str = "llmgw") -> Iterator[Command]:
    """Every command of `app`, a group before its commands, hidden ones included."""
    root = typer.main.get_command(app)
    yield from _walk(root, name, None)


def _walk(command: Any, path: str, parent: Any) -> Iterator[Command]:
    context = command.context_class(command, info_name=path.rsplit(" ", 1)[-1], parent=parent)
    found = Command(path, command, context)
    yield found
    for name, sub in found.subcommands.items():
        yield from _walk(sub, f"{path} {name}", context)


def render(app: typer.Typer | None = None, name: str = "llmgw") -> str:
    """The commands page's body for `app` (the `llmgw` CLI unless given), run as `name`."""
    if app is None:
        from llmgw.cli.main import app as llmgw_app

        app = llmgw_app
    commands = list(walk(app, name))
    hidden = [c.path for c in commands if c.command.hidden]
    hidden += [f"{c.path} {_names(p)}" for c in commands if not c.command.hidden
               for p in c.command.get_params(c.context) if getattr(p, "hidden", False)]
    shown = [c for c in commands if not c.command.hidden and not _under_hidden(c, hidden)]
    out = [_preface(hidden)]
    for c in shown:
        out.append(_command(c))
    return "\n\n".join(out) + "\n"


def _under_hidden(c: Command, hidden: list[str]) -> bool:
    return any(c.path.startswith(h + " ") for h in hidden)


def _preface(hidden: list[str]) -> str:
    left_out = (f"{len(hidden)} hidden command(s) or option(s) are left out: "
                + ", ".join(md.code(h) for h in hidden) + "." if hidden
                else "Commands and options the code marks hidden would be left out; none is.")
    return ("Every command takes `--help`, which prints the same text as this page. "
            + left_out)


def _command(c: Command) -> str:
    level = 2 if c.subcommands or " " not in c.path else 3
    out = [md.heading(level, c.path, c.ident), md.prose(c.command.help)]
    usage = c.command.get_usage(c.context).removeprefix("Usage: ")
    out.append(f"```text\n{usage}\n```")
    params = [p for p in c.command.get_params(c.context)
              if p.name not in _COMMON and not getattr(p, "hidden", False)]
    arguments = [p for p in params if p.param_type_name == "argument"]
    options = [p for p in params if p.param_type_name == "option"]
    if arguments:
        out.append(md.table(["Argument", "Description"],
                            [[md.code(_metavar(p)), _argument_text(p)] for p in arguments]))
    if options:
        out.append(md.table(["Option", "Type", "Default", "Description"],
                            [[_names(p, code=True), _type(p, c.context), _default(p), _option_text(p)]
                             for p in options]))
    subs = {name: sub for name, sub in c.subcommands.items() if not sub.hidden}
    if subs:
        rows = [[f"[{md.code(name)}](#{md.anchor(c.path + ' ' + name)})",
                 md.escape(sub.get_short_help_str(limit=300))] for name, sub in subs.items()]
        out.append(md.table(["Command", "What it does"], rows))
    return "\n\n".join(part for part in out if part)


def _names(p: Any, code: bool = False) -> str:
    names = [*p.opts, *p.secondary_opts]
    return " / ".join(md.code(n) for n in names) if code else " / ".join(names)


def _metavar(p: Any) -> str:
    name = str(p.name).upper()
    return f"{name}..." if p.nargs == -1 else name


def _argument_text(p: Any) -> str:
    text = md.line(getattr(p, "help", None))
    notes = []
    if p.nargs == -1:
        notes.append("one or more" if p.required else "any number")
    elif not p.required:
        notes.append("optional")
    return text + (f" ({', '.join(notes)})" if notes else "")


def _type(p: Any, context: Any) -> str:
    if p.is_flag:
        return "flag"
    desc = p.type_descriptor
    label = p.display_type(context).removeprefix("<").removesuffix(">")
    if desc.is_list and label.startswith("list[") and label.endswith("]"):
        label = label[5:-1]
    label = label.removesuffix(" range")
    kind = {"str": "text", "int": "integer", "float": "number", "path": "path"}.get(label)
    shown = kind or " \\| ".join(md.code(choice) for choice in label.split("|"))
    return shown + (", repeatable" if p.multiple else "")


def _default(p: Any) -> str:
    if p.required:
        return "required"
    value = p.default
    if p.is_flag and p.secondary_opts:
        return md.code(p.opts[0] if value else p.secondary_opts[0])
    if p.is_flag:
        return "on" if value else "off"
    if value is None or value == "" or value == []:
        return ""
    if isinstance(value, enum.Enum):
        value = value.value
    return md.code(value)


def _option_text(p: Any) -> str:
    text = md.line(p.help)
    notes = []
    if getattr(p, "min", None) is not None or getattr(p, "max", None) is not None:
        notes.append(f"from {p.min} to {p.max}" if p.min is not None and p.max is not None
                     else f"at least {p.min}" if p.min is not None else f"at most {p.max}")
    envvars = [p.envvar] if isinstance(p.envvar, str) else list(p.envvar or [])
    if envvars:
        notes.append("env " + ", ".join(md.code(e) for e in envvars))
    return text + "".join(f" ({note})" for note in notes)
