"""Markdown for the reference pages: prose from docstrings and help texts, code, tables."""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable, Sequence

# A code span (its backticks balanced), kept as written; everything else is escaped.
_CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.DOTALL)
# What Markdown (or the HTML it may hold) would read as markup in help texts and docstrings, which
# are written as plain text: `[node]` would be a link, `<key>` a tag, `*` emphasis, and so would
# `_` but inside a word (`redis_url` stays as it is written).
_MARKUP = re.compile(r"([\\*\[\]|]|(?<!\w)_|_(?!\w))")


# A line opening or closing a fenced code block.
_FENCE = re.compile(r"^\s*(```|~~~)")


def unescape_table_code_pipes(markdown: str) -> str:
    """`\\|` inside the code spans of table rows as `|`. GitHub needs the backslash there to keep
    the cell whole, and drops it; Python-Markdown's tables already keep a code span's pipes in
    their cell, and would show the backslash (`user\\|admin`)."""
    out = []
    fenced = False
    for row in markdown.split("\n"):
        if _FENCE.match(row):
            fenced = not fenced
        elif not fenced and row.lstrip().startswith("|"):
            row = _CODE_SPAN.sub(lambda m: m.group(0).replace("\\|", "|"), row)
        out.append(row)
    return "\n".join(out)


def escape(text: str) -> str:
    """Plain text as Markdown that shows it as it is; code spans (`...`) stay code."""
    out: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_plain(text[last:span.start()]))
        out.append(span.group(0))
        last = span.end()
    out.append(_plain(text[last:]))
    return "".join(out)


def _plain(text: str) -> str:
    text = _MARKUP.sub(r"\\\1", text)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def paragraphs(text: str | None) -> list[str]:
    """A docstring or help text's paragraphs (blank-line separated), each on one line, escaped;
    a paragraph of `- ` items stays a list, an item to a line."""
    cleaned = inspect.cleandoc(text or "")
    out = []
    for block in re.split(r"\n\s*\n", cleaned):
        lines = [line.strip() for line in block.splitlines() if line.strip()]
        if not lines:
            continue
        if lines[0].startswith("- "):
            items: list[list[str]] = []
            for line in lines:
                if line.startswith("- ") or not items:
                    items.append([line.removeprefix("- ")])
                else:
                    items[-1].append(line)
            out.append("\n".join("- " + escape(" ".join(item)) for item in items))
        else:
            out.append(escape(" ".join(lines)))
    return out


def prose(text: str | None) -> str:
    """A docstring or help text as Markdown paragraphs."""
    return "\n\n".join(paragraphs(text))


def line(text: str | None) -> str:
    """A docstring or help text on one line (for a table cell): its paragraphs joined."""
    return " ".join(paragraphs(text))


def first_sentence(text: str | None) -> str:
    """The first sentence of a text's first paragraph (for a summary table)."""
    found = paragraphs(text)
    if not found:
        return ""
    return re.split(r"(?<=\.)\s", found[0], maxsplit=1)[0]


def code(value: object) -> str:
    """`value` as a code span, whatever backticks it holds."""
    text = str(value)
    fence = "``" if "`" in text else "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A Markdown table; cells are Markdown already (escape plain text first)."""
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cell.replace("\n", " ") or " " for cell in row) + " |" for row in rows]
    return "\n".join(out)


def anchor(text: str) -> str:
    """An id for a heading: lower case, words joined by hyphens (stable, unlike the theme's)."""
    return re.sub(r"[^a-z0-9_]+", "-", text.lower()).strip("-")


def heading(level: int, text: str, ident: str) -> str:
    """A heading with an explicit id, so links to it do not depend on how its text is slugged."""
    return f"{'#' * level} {text} {{#{ident}}}"
