"""Help that shows a type only where an option takes a value.

typer's rich help (0.29) prints every option's type, flags' too: `--demo  --no-demo  <bool>`
and `--help  <bool>` read as if they took a value, which they do not. Its plain help leaves
flags' types out; this makes the rich help do the same, for every command at once.
"""

from __future__ import annotations

from typing import Any

import typer.core


def flags_show_no_type() -> None:
    """Patch typer's option class so that a flag (`--json`, `--demo/--no-demo`) shows no type."""
    option = typer.core.TyperOption
    shown = getattr(option, "display_type_rich", None)
    if shown is None or getattr(shown, "_llmgw_flags", False):
        return  # a typer without typed help, or patched already

    def display_type_rich(self: Any, ctx: Any) -> str | None:
        if self.is_flag and not self.count:
            return None
        return shown(self, ctx)  # type: ignore[no-any-return]

    display_type_rich._llmgw_flags = True  # type: ignore[attr-defined]
    option.display_type_rich = display_type_rich  # type: ignore[method-assign]
