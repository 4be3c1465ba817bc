"""What every `llmgw ctl` command shares: the global options of one invocation, and the admin API
calls made with them."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import urlencode

import typer
from pydantic import BaseModel, ValidationError

from llmgw.cli import render
from llmgw.cli.client import AdminClient, CtlError

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class CtlContext:
    """`llmgw ctl`'s global options, kept on typer's context (`ctx.obj`) by the group's callback,
    so two invocations in one process never see each other's."""

    url: str | None = None
    key: str | None = field(default=None, repr=False)
    json: bool = False

    @classmethod
    def of(cls, ctx: typer.Context) -> CtlContext:
        """The options of the invocation `ctx` belongs to; the defaults when none were given."""
        found = ctx.find_object(cls)
        return found if found is not None else cls()

    def _client(self) -> AdminClient:
        try:
            return AdminClient.resolve(self.url, self.key)
        except CtlError as exc:
            render.error(str(exc))
            raise typer.Exit(1) from None

    def server_url(self) -> str:
        """The server URL ctl talks to (flag, env or config file), for commands that print it."""
        return self._client().url

    def call(self, method: str, path: str, body: Any = None, quiet_404: bool = False) -> Any:
        """One admin call; an error is printed and exits 1 (with quiet_404, a 404 is LookupError)."""
        client = self._client()
        try:
            return client.call(method, path, body)
        except CtlError as exc:
            if quiet_404 and str(exc).startswith("404"):
                raise LookupError(str(exc)) from None
            render.error(str(exc))
            raise typer.Exit(1) from None

    def show(self, data: Any, as_table: Callable[[Any], None]) -> None:
        """`data` as JSON with `--json`, else as `as_table` renders it for people."""
        if self.json:
            render.emit_json(data)
        else:
            as_table(data)

    def show_as(self, out: type[M], data: Any, as_table: Callable[[M], None]) -> None:
        """`data` as the server sent it with `--json`; else read as the response model `out` and
        rendered by `as_table`."""
        if self.json:
            render.emit_json(data)
        else:
            as_table(parse(out, data))


def parse(out: type[M], data: Any) -> M:
    """A server's answer as its protocol response model; one that does not fit (a server of
    another version) is an error line, not a traceback."""
    try:
        return out.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in err["loc"]) or "the answer"
        render.error(f"the server answered what this ctl cannot read ({where}: {err['msg']}); "
                     "is it another version of llmgw?")
        raise typer.Exit(1) from None


def body(request: BaseModel) -> dict[str, Any]:
    """A protocol model as a request body: only the fields ctl set, so the server's defaults and
    "unchanged when left out" rules apply to the rest."""
    return request.model_dump(mode="json", exclude_unset=True)


def query(request: BaseModel) -> str:
    """A protocol query model as a query string (`?a=1&b=x`, or empty): only the fields ctl set."""
    fields = {k: str(v).lower() if isinstance(v, bool) else v
              for k, v in body(request).items() if v is not None}
    return "?" + urlencode(fields) if fields else ""


@contextmanager
def options_for(fields: Mapping[str, str]) -> Iterator[None]:
    """Build request models inside: a value a model refuses is one error line naming the option
    that gave it, and exit 1. `fields` maps `field` or `Model.field` (or `Model`, for a rule
    across fields) to the option."""
    try:
        yield
    except ValidationError as exc:
        render.error(refusal(exc, fields))
        raise typer.Exit(1) from None


def refusal(exc: ValidationError, fields: Mapping[str, str]) -> str:
    """The first thing `exc` refuses, said as ctl's options name it (never the value given)."""
    err = exc.errors(include_url=False)[0]
    parts = [str(p) for p in err["loc"] if isinstance(p, str)]
    keys = [k for part in reversed(parts) for k in (f"{exc.title}.{part}", part)] + [exc.title]
    option = next((fields[k] for k in keys if k in fields), None)
    message = str(err["msg"]).removeprefix("Value error, ")
    return f"{option}: {message}" if option else message
