"""The configuration reference: every key of config.toml and of the node agent's file, from the
settings models (types, defaults, bounds, and each field's docstring), and the environment."""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from docsgen import md
from llmgw.core.settings import toml_value

# How `settings.load` reads config.toml: the `[server]` table is ServerSettings itself, and each
# of its fields that is a model of its own is read from the table of the field's name.
SERVER_TABLE = "server"


@dataclass(frozen=True)
class Key:
    """One key of a config file: the table it is in, its name and the model field behind it."""

    table: str
    name: str
    field: FieldInfo

    @property
    def ident(self) -> str:
        """The id of the key's heading: `limits-redis_url`."""
        return md.anchor(f"{self.table}-{self.name}")


def tables(model: type[BaseModel], table: str) -> dict[str, type[BaseModel]]:
    """The TOML tables `model` is read from: `table` for its own scalar keys, then one per field
    that is a model itself (named after the field)."""
    out = {table: model}
    for name, info in model.model_fields.items():
        if _is_model(info.annotation):
            out[name] = typing.cast(type[BaseModel], info.annotation)
    return out


def keys(model: type[BaseModel], table: str) -> Iterator[Key]:
    """Every key of every table `model` is read from, table by table."""
    for name, section in tables(model, table).items():
        for field_name, info in section.model_fields.items():
            if not _is_model(info.annotation):
                yield Key(name, field_name, info)


def _is_model(annotation: Any) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def render() -> str:
    """The configuration page's body."""
    from llmgw.core import settings
    from llmgw.server.node_run import NodeConfig

    out = [md.heading(2, "config.toml", "config-toml"),
           f"`DATA_DIR/{settings.CONFIG_FILE}` is the install's configuration. "
           + md.prose(settings.ServerSettings.__doc__)
           + " A key left out takes its default; an unknown key, or a value out of its bounds, "
             "stops the server with a message naming it. The file is read when the server "
             "starts.",
           "What `server init` writes (every key at its default):",
           "```toml\n" + settings.dump(settings.ServerSettings(key_secret="…")) + "```"]
    moved = ", ".join(md.code(k) for k in settings._MOVED_TO_CONTROL)
    for table, model in tables(settings.ServerSettings, SERVER_TABLE).items():
        out.append(md.heading(3, md.code(f"[{table}]"), f"table-{table}"))
        if table != SERVER_TABLE:
            out.append(md.prose(model.__doc__))
        if table == "control":
            out.append(f"Earlier versions wrote {moved} under `[server]`: they are still read there.")
        out += [_key(k) for k in keys(model, table) if k.table == table]
    out += [md.heading(2, "The node agent's file", "node-file"),
            md.prose(NodeConfig.__doc__), md.heading(3, md.code("[node]"), "table-node")]
    out += [_key(k) for k in keys(NodeConfig, "node")]
    out += [md.heading(2, "Environment variables", "environment"),
            "The variables llmgw reads (configuration keys are read from the files above only).",
            md.table(["Variable", "What it sets"],
                     [[md.code(name), md.escape(text)] for name, text in settings.ENVIRONMENT.items()])]
    return "\n\n".join(out) + "\n"


def _key(k: Key) -> str:
    facts = [f"**Type** {type_name(k.field.annotation)}", f"**Default** {default(k.field)}"]
    bounds = constraints(k.field)
    if bounds:
        facts.append("**Bounds** " + ", ".join(bounds))
    return "\n\n".join([md.heading(4, md.code(k.name), k.ident), " · ".join(facts),
                        md.prose(k.field.description)])


def type_name(annotation: Any) -> str:
    """A field's type as a reader of TOML sees it."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " or ".join(md.code(toml_value(a)) for a in args)
    if origin in (typing.Union, types.UnionType):
        shown = [type_name(a) for a in args if a is not type(None)]
        return " or ".join(shown)
    if origin is list:
        return f"list of {type_name(args[0])}s"
    if origin is dict:
        return f"table of {type_name(args[1])}s"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", Path: "path"}
    return names.get(annotation, md.code(getattr(annotation, "__name__", annotation)))


def default(info: FieldInfo) -> str:
    """A field's default as TOML, or why it has none."""
    if info.is_required():
        return "required"
    value = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    if value is None or value is PydanticUndefined:
        return "none"
    shown = md.code(toml_value(value))
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1024 * 1024 and value % 1024 == 0:
        shown += f" ({value // (1024 * 1024)} MiB)" if value % (1024 * 1024) == 0 else ""
    return shown


def constraints(info: FieldInfo) -> list[str]:
    """A field's numeric bounds, as `> 0`, `≤ 300`."""
    signs = {annotated_types.Gt: ("gt", ">"), annotated_types.Ge: ("ge", "≥"),
             annotated_types.Lt: ("lt", "<"), annotated_types.Le: ("le", "≤")}
    out = []
    for meta in info.metadata:
        for kind, (attr, sign) in signs.items():
            if isinstance(meta, kind):
                out.append(f"{sign} {_number(getattr(meta, attr))}")
    return out


def _number(value: Any) -> str:
    return repr(value)


