"""The metrics reference: every family a scrape of `/metrics` may show, from the table the
collectors build them from (`llmgw.gateway.metrics.FAMILIES`)."""

from __future__ import annotations

from docsgen import md
from llmgw.gateway.metrics import FAMILIES, LABELS, Family

_UNITS = {"_seconds": "seconds"}


def heading_name(family: Family) -> str:
    """The name a family is looked up by: its one sample name, or a histogram's own name."""
    return family.sample_names[0] if len(family.sample_names) == 1 else family.name


def render() -> str:
    """The metrics page's body."""
    out = [md.table(["Metric", "Type", "Labels", "What it counts"],
                    [[f"[{md.code(heading_name(f))}](#{md.anchor(f.name)})", f.kind,
                      ", ".join(md.code(label) for label in f.labels),
                      md.escape(f.help)] for f in FAMILIES])]
    out += [_family(f) for f in FAMILIES]
    used = [label for label in LABELS if any(label in f.labels for f in FAMILIES)]
    out += [md.heading(2, "Labels", "labels"),
            md.table(["Label", "What it holds"],
                     [[md.code(label), md.escape(LABELS[label])] for label in used])]
    return "\n\n".join(out) + "\n"


def _family(f: Family) -> str:
    facts = [f"**Type** {f.kind}"]
    if f.labels:
        facts.append("**Labels** " + ", ".join(f"[{md.code(label)}](#labels)" for label in f.labels))
    else:
        facts.append("**Labels** none")
    parts = [md.heading(3, md.code(heading_name(f)), md.anchor(f.name)), " · ".join(facts),
             md.escape(f.help) + "."]
    if f.kind == "histogram":
        unit = next((u for suffix, u in _UNITS.items() if f.name.endswith(suffix)), "")
        bounds = ", ".join(repr(b) for b in f.buckets)
        parts.append(f"Samples {', '.join(md.code(s) for s in f.sample_names)}; bucket upper "
                     f"bounds{' in ' + unit if unit else ''}: {bounds} and `+Inf`.")
    if f.when:
        parts.append("**Shown** " + md.escape(f.when))
    return "\n\n".join(parts)
