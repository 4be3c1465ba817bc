"""`llmgw ctl mcp …`: upstream MCP servers whose tools llmgw serves at `/mcp`."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body, options_for
from llmgw.cli.ctl_models import key_values
from llmgw.cli.render import Col
from llmgw.core.mcp import McpCredential, McpServer, McpTransport
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.mcp import McpServerOut, McpServerRequest, McpToolOut

mcp_app = typer.Typer(help="Upstream MCP servers: their tools are served at /mcp to the keys "
                           "granted them.", no_args_is_help=True)

Opt = typer.Option
Name = Annotated[str, typer.Argument(help="The server's name: clients see its tools as "
                                          "NAME__TOOL.")]
_OPTIONS = {"name": "NAME", "url": "--url", "transport": "--transport", "env": "--env",
            "McpCredential.env": "--credential-env", "McpCredential.file": "--credential-file",
            "header": "--header", "scheme": "--scheme", "node": "--node", "bundles": "--bundle",
            "max_concurrency": "--max-concurrency", "cost_per_call": "--cost-per-call",
            "timeout_s": "--timeout", "max_result_bytes": "--max-result-bytes", "note": "--note",
            "command": "--command", "McpCredential": "--credential-env or --credential-file"}


def _where(s: McpServer) -> str:
    """Where a server is: its URL, or the command a node runs."""
    return s.url if s.url is not None else shlex.join(s.command)


def credential_text(c: McpCredential | None) -> str:
    """Where a credential is read (never its value: llmgw does not hold it)."""
    if c is None:
        return "-"
    source = f"env {c.env}" if c.env is not None else f"file {c.file}"
    return f"{source} as {c.header}: {c.scheme + ' ' if c.scheme else ''}…"


def _servers_table(servers: Sequence[McpServerOut]) -> None:
    render.table(
        "MCP servers",
        [Col("name", whole=True), "transport", Col("url or command", clip=True), "node", "bundles",
         "enabled", Col("credential", optional=True), Col("keys", optional=True),
         Col("teams", optional=True), Col("by", optional=True)],
        [[s.name, s.transport.value, _where(s), s.node or "-", ",".join(s.bundles) or "-",
          "yes" if s.enabled else "no", credential_text(s.credential), len(s.keys),
          ",".join(s.teams) or "-", s.by] for s in servers],
    )


def _server_detail(s: McpServerOut) -> None:
    limits = [f"at most {s.max_concurrency} calls in flight" if s.max_concurrency else
              "no cap on calls in flight", f"timeout {s.timeout_s:g}s",
              f"results up to {s.max_result_bytes:,} bytes"]
    if s.cost_per_call is not None:
        limits.append(f"${s.cost_per_call:g} per call")
    lines = [
        f"MCP server {s.name} ({s.transport.value}, {'enabled' if s.enabled else 'disabled'}): "
        f"{_where(s)}",
        f"credential: {credential_text(s.credential)}",
        *([f"runs on node {s.node or 'of the server'}; env: "
           f"{', '.join(f'{k}={v}' for k, v in s.env.items()) or '-'}"]
          if s.transport is McpTransport.STDIO else []),
        f"bundles: {', '.join(s.bundles) or '-'}; {', '.join(limits)}",
        f"used by keys: {', '.join(s.keys) or '-'}; teams: {', '.join(s.teams) or '-'} "
        "(and admin keys)",
        f"by {s.by or '-'}" + (f"; note: {s.note}" if s.note else ""),
    ]
    for line in lines:
        render.console.print(line, highlight=False, markup=False)


@mcp_app.command("add")
def mcp_add(
    ctx: typer.Context,
    name: Name,
    argv: Annotated[list[str] | None, typer.Argument(
        help="After --: the argv of a stdio server, run by a node agent (no shell).",
        show_default=False)] = None,
    url: Annotated[str | None, Opt(help="A remote server's URL (http:// or https://, no "
                                        "credentials in it).")] = None,
    transport: Annotated[McpTransport | None, Opt(
        help="http (streamable HTTP, the default with --url), sse (the older HTTP+SSE), or "
             "stdio (the default with a command).", case_sensitive=False)] = None,
    command: Annotated[str | None, Opt(help="A stdio server's command, one shell-quoted string "
                                            "(or give its argv after --).")] = None,
    env: Annotated[list[str] | None, Opt(help="KEY=VALUE in a stdio server's environment "
                                              "(repeatable).")] = None,
    node: Annotated[str | None, Opt(help="The node that runs a stdio server (default: the "
                                         "server's own).")] = None,
    credential_env: Annotated[str | None, Opt(help="The environment variable, on every llmgw "
                                                   "server, holding the upstream's credential "
                                                   "(read at each call, never stored).")] = None,
    credential_file: Annotated[str | None, Opt(help="Or the file, on every llmgw server, "
                                                    "holding it.")] = None,
    header: Annotated[str, Opt(help="The header the credential is sent in.")] = "Authorization",
    scheme: Annotated[str, Opt(help="Put before the credential in the header (\"\": none).")
                      ] = "Bearer",
    bundle: Annotated[list[str] | None, Opt(help="A bundle (served at /mcp/BUNDLE) its tools "
                                                 "are part of (repeatable).")] = None,
    max_concurrency: Annotated[int | None, Opt(help="Calls in flight to it across every worker "
                                                    "and server (default: no cap).")] = None,
    cost_per_call: Annotated[float | None, Opt(help="USD counted in usage per call.")] = None,
    timeout: Annotated[float | None, Opt(help="Seconds a call may take (default: 60).")] = None,
    max_result_bytes: Annotated[int | None, Opt(help="The largest result passed on (default: "
                                                     "1 MiB).")] = None,
    note: Annotated[str | None, Opt(help="Owner or purpose.")] = None,
) -> None:
    """Add an upstream MCP server: remote by --url, or local by --command (or an argv after
    --) run over stdio by a node agent. No key may use its tools until granted them
    (`ctl key create --tools-allow`, `ctl team create --tools-allow`)."""
    ctl = CtlContext.of(ctx)
    if command is not None and argv:
        render.error("give the command either as --command or after --, not both")
        raise typer.Exit(2)
    given_credential = credential_env is not None or credential_file is not None
    with options_for(_OPTIONS):
        credential = McpCredential(env=credential_env, file=credential_file, header=header,
                                   scheme=scheme) if given_credential else None
        argv = shlex.split(command) if command is not None else argv or []
        fields = {"url": url, "transport": transport, "credential": credential,
                  "command": argv or None, "env": key_values(env, "--env") or None, "node": node,
                  "bundles": bundle or None, "max_concurrency": max_concurrency,
                  "cost_per_call": cost_per_call, "timeout_s": timeout,
                  "max_result_bytes": max_result_bytes, "note": note}
        # The server checks the whole and says in words what is wrong.
        request = McpServerRequest(name=name, **{k: v for k, v in fields.items() if v is not None})
    ctl.show_as(McpServerOut, ctl.call("POST", "/admin/v1/mcp/servers", body(request)),
                _server_detail)


@mcp_app.command("list")
def mcp_list(ctx: typer.Context) -> None:
    """Every upstream MCP server: where it is, its bundles, and how many keys may use it."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[McpServerOut], ctl.call("GET", "/admin/v1/mcp/servers"),
                lambda d: _servers_table(d.data))


@mcp_app.command("show")
def mcp_show(ctx: typer.Context, name: Name) -> None:
    """One server: where it is, where its credential is read, its limits, and the keys and
    teams granted its tools."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(McpServerOut, ctl.call("GET", f"/admin/v1/mcp/servers/{quote(name)}"),
                _server_detail)


@mcp_app.command("remove")
def mcp_remove(ctx: typer.Context, name: Name) -> None:
    """Remove a server: its tools are gone from /mcp from every server's next refresh."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(Removed, ctl.call("DELETE", f"/admin/v1/mcp/servers/{quote(name)}"),
                lambda r: render.console.print(f"removed MCP server {r.name}", highlight=False))


@mcp_app.command("tools")
def mcp_tools(ctx: typer.Context, name: Name) -> None:
    """The tools the server offers now, as llmgw asks it."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[McpToolOut], ctl.call("GET", f"/admin/v1/mcp/servers/{quote(name)}/tools"),
                lambda d: render.table(f"tools of {name}", [Col("name", whole=True), "description"],
                                       [[t.name, t.description or ""] for t in d.data]))
