"""The docs site's build hooks (mkdocs.yml `hooks:`).

A page asks for a generated part with a line of its own, `<!-- llmgw:reference NAME -->`, which is
replaced by what `docsgen.reference` makes of the code; the benchmark plots are drawn from bench/'s
JSON and added to the site as files, so `mkdocs build --strict` checks the links to them."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from typing import Any

# mkdocs loads this file by path: the repository root is where `docsgen` and `bench` live.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from docsgen import md, plots, reference  # noqa: E402

_MARKER = re.compile(r"^<!-- llmgw:reference (?P<name>[a-z-]+) -->$", re.MULTILINE)
# The diagram renderer served with the site (scripts/common.sh `ensure_mermaid` fetches it): with
# it defined on the page the theme draws diagrams without reaching its CDN.
MERMAID_URI = "assets/javascripts/mermaid.min.js"


def _mermaid() -> Path | None:
    named = os.environ.get("LLMGW_MERMAID_JS")
    if named:
        return Path(named)
    cached = sorted((ROOT / ".cache" / "docs").glob("mermaid-*.min.js"))
    return cached[-1] if cached else None


def on_config(config: Any) -> Any:
    """Serve the local diagram renderer when this machine has it (else the theme's CDN copy)."""
    js = _mermaid()
    if js is not None:
        if not js.is_file():
            raise FileNotFoundError(f"LLMGW_MERMAID_JS names {js}, which does not exist")
        config.extra_javascript.append(MERMAID_URI)
    return config


def on_files(files: Any, config: Any) -> Any:
    """Add the generated files (plots, the OpenAPI document) to the site."""
    from mkdocs.structure.files import File

    made = {**plots.generated(), **reference.files()}
    js = _mermaid()
    if js is not None:
        made[MERMAID_URI] = js.read_bytes()
    for uri, content in made.items():
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Expand each reference marker into the Markdown made from the code, and each plot-table
    marker into a table of the recorded benchmark figures; pipes escaped for GitHub inside a
    table's code spans show as pipes."""
    markdown = plots.expand(markdown)
    return md.unescape_table_code_pipes(
        _MARKER.sub(lambda m: reference.render(m.group("name")), markdown))
