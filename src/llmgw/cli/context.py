"""What every `llmgw ctl` command shares: the global options of one invocation, and the admin API
calls made with them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import typer

from llmgw.cli import render
from llmgw.cli.client import AdminClient, CtlError


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
