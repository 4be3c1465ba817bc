"""The docs site's build hooks (mkdocs.yml `hooks:`).

A page asks for a generated part with a line of its own, `<!-- llmgw:reference NAME -->`, which is
replaced by what `docsgen.reference` makes of the code; the benchmark plots are drawn from bench/'s
JSON and added to the site as files, so `mkdocs build --strict` checks the links to them."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# mkdocs loads this file by path: the repository root is where `docsgen` and `bench` live.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from docsgen import plots, reference  # noqa: E402

_MARKER = re.compile(r"^<!-- llmgw:reference (?P<name>[a-z-]+) -->$", re.MULTILINE)


def on_files(files: Any, config: Any) -> Any:
    """Add the generated files (plots, the OpenAPI document) to the site."""
    from mkdocs.structure.files import File

    for uri, content in {**plots.generated(), **reference.files()}.items():
        files.append(File.generated(config, uri, content=content))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """Expand each reference marker into the Markdown made from the code, and each plot-table
    marker into a table of the recorded benchmark figures."""
    markdown = plots.expand(markdown)
    return _MARKER.sub(lambda m: reference.render(m.group("name")), markdown)
