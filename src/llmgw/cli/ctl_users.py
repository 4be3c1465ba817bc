"""`llmgw ctl user …`: people who sign in to the console through the identity provider, their
roles and their console sessions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated

import typer

from llmgw.cli import render
from llmgw.cli.client import quote
from llmgw.cli.context import CtlContext, body
from llmgw.core.protocol.common import DataList
from llmgw.core.protocol.users import RoleRequest, SessionsEnded, UserOut
from llmgw.core.users import Grant

user_app = typer.Typer(help="People who sign in to the console through the identity provider: "
                            "their roles and console sessions. Admin keys only.",
                       no_args_is_help=True)

UserRef = Annotated[str, typer.Argument(
    help="The user's id, or their email if the identity provider verified it.")]
# What `role` takes for "signed in, no access" (sent as null).
NO_ROLE = "none"
ROLES = f"admin, operator, viewer, team-admin:TEAM or {NO_ROLE}"


def parse_role(text: str) -> str | None:
    """ROLE as the server takes it (None for `none`); one it would refuse is a usage error here."""
    if text.strip().lower() == NO_ROLE:
        return None
    try:
        return str(Grant.parse(text))
    except ValueError:
        raise typer.BadParameter(f"expected {ROLES}; got {text!r}", param_hint="'ROLE'") from None


def _users_table(users: Sequence[UserOut]) -> None:
    render.table(
        "users",
        [render.Col("email", whole=True), render.Col("id", whole=True), "name", "role",
         "role from", "sessions", "signed in", "verified", render.Col("issuer", optional=True)],
        [[u.email, u.id, u.name, u.role or NO_ROLE, u.role_source, u.sessions,
          render.when(u.signed_in_at), "yes" if u.email_verified else "no", u.issuer]
         for u in users],
    )


@user_app.command("list")
def user_list(ctx: typer.Context) -> None:
    """Everyone who signed in to the console: role, where it came from, live sessions, and
    whether the provider verified the email (only a verified one finds a user)."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(DataList[UserOut], ctl.call("GET", "/admin/v1/users"), lambda d: _users_table(d.data))


@user_app.command("show")
def user_show(ctx: typer.Context, user: UserRef) -> None:
    """One user."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(UserOut, ctl.call("GET", f"/admin/v1/users/{quote(user)}"),
                lambda u: _users_table([u]))


@user_app.command("role")
def user_role(
    ctx: typer.Context,
    user: UserRef,
    role: Annotated[str, typer.Argument(
        help=f"The role: {ROLES} (signed in, no access).")],
) -> None:
    """Set a user's role by hand: from then on the provider's groups no longer change it, and
    their console sessions take it at once."""
    ctl = CtlContext.of(ctx)
    request = RoleRequest(role=parse_role(role))
    ctl.show_as(UserOut, ctl.call("PUT", f"/admin/v1/users/{quote(user)}/role", body(request)),
                lambda u: _users_table([u]))


@user_app.command("signout")
def user_signout(ctx: typer.Context, user: UserRef) -> None:
    """End every console session of a user, on every server; they may sign in again."""
    ctl = CtlContext.of(ctx)

    def said(r: SessionsEnded) -> None:
        who = user if user == r.user else f"{user} ({r.user})"
        render.console.print(f"ended {r.ended} console session{'s' if r.ended != 1 else ''} "
                             f"of {who}", highlight=False, markup=False)

    ctl.show_as(SessionsEnded, ctl.call("POST", f"/admin/v1/users/{quote(user)}/signout"), said)


@user_app.command("remove")
def user_remove(ctx: typer.Context, user: UserRef) -> None:
    """Forget a user and end their sessions; they may sign in again, as a new user whose role
    comes from their groups."""
    ctl = CtlContext.of(ctx)
    ctl.show_as(UserOut, ctl.call("DELETE", f"/admin/v1/users/{quote(user)}"),
                lambda u: render.console.print(f"removed user {u.email or u.subject} ({u.id})",
                                               highlight=False, markup=False))
