"""The HTTP API reference: every operation of the OpenAPI document the server serves at
`/openapi.json`, grouped by tag, with who may call it; the document itself is published beside
the page."""

from __future__ import annotations

import json
from typing import Any

from docsgen import md

METHODS = ("get", "put", "post", "delete", "patch", "options", "head", "trace")
# Where the site publishes the document, beside the page.
DOCUMENT_URI = "reference/openapi.json"


def document() -> dict[str, Any]:
    """The OpenAPI document, as the server builds it for `/openapi.json`."""
    from llmgw.api.registry import spec

    return spec()


def document_bytes() -> bytes:
    """The document as the site publishes it (indented, for reading)."""
    return (json.dumps(document(), indent=2, ensure_ascii=False) + "\n").encode()


def operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """Every (path, method, operation) of `doc`, in its order."""
    return [(path, method, op) for path, item in doc["paths"].items()
            for method, op in item.items() if method in METHODS]


def render() -> str:
    """The HTTP API page's body."""
    doc = document()
    access = doc.get("x-llmgw-access", {})
    tags = {t["name"]: t.get("description", "") for t in doc.get("tags", [])}
    out = [f"{md.escape(doc['info']['description'])} Version {doc['info']['version']} of the "
           f"document is published with this site as [`openapi.json`](openapi.json), and every "
           "server answers it at `/openapi.json`.",
           md.heading(2, "Who may call what", "access"),
           "Each operation says who may call it; the key goes in `Authorization: Bearer <key>` "
           "(or `x-api-key`, as Anthropic's clients send it).",
           md.table(["Access", "Who"], [[md.code(name), md.escape(text)] for name, text in access.items()])]
    for tag, text in tags.items():
        ops = [(path, method, op) for path, method, op in operations(doc) if tag in op.get("tags", [])]
        out += [md.heading(2, tag, f"tag-{tag}"), md.escape(text),
                md.table(["Operation", "Summary", "Access"],
                         [[f"[{md.code(method.upper() + ' ' + path)}](#{md.anchor(op['operationId'])})",
                           md.escape(op.get("summary", "")), md.code(op.get("x-llmgw-access", ""))]
                          for path, method, op in ops])]
        out += [_operation(doc, path, method, op, access) for path, method, op in ops]
    return "\n\n".join(out) + "\n"


def _operation(doc: dict[str, Any], path: str, method: str, op: dict[str, Any],
               access: dict[str, str]) -> str:
    who = op.get("x-llmgw-access", "")
    parts = [md.heading(3, md.code(f"{method.upper()} {path}"), md.anchor(op["operationId"])),
             f"**{md.escape(op.get('summary', ''))}.**"]
    if op.get("description"):
        parts.append(md.prose(op["description"]))
    parts.append(f"**Access** {md.code(who)}: {md.escape(access.get(who, ''))} · "
                 f"**Operation id** {md.code(op['operationId'])}")
    params = [*doc["paths"][path].get("parameters", []), *op.get("parameters", [])]
    if params:
        parts.append(md.table(
            ["Parameter", "In", "Type", "Required", "Description"],
            [[md.code(p["name"]), p["in"], _schema(p.get("schema", {})),
              "yes" if p.get("required") else "no", md.escape(p.get("description", ""))]
             for p in params]))
    body = op.get("requestBody")
    if body is not None:
        parts.append("**Request body** " + "; ".join(
            f"{md.code(media)}: {_schema(content.get('schema', {}), fields=True)}"
            for media, content in body.get("content", {}).items()))
    rows: list[list[str]] = []
    failures: dict[str, list[str]] = {}
    for status, answer in op.get("responses", {}).items():
        if "$ref" in answer:  # the shared error answers: said once, not as a row each
            name = answer["$ref"].rsplit("/", 1)[-1]
            failures.setdefault(doc["components"]["responses"][name]["description"], []).append(status)
            continue
        content = answer.get("content", {})
        rows.append([md.code(status), md.escape(answer.get("description", "")),
                     "<br>".join(f"{md.code(media)}: {_schema(c.get('schema', {}))}"
                                 for media, c in content.items())])
    parts.append(md.table(["Status", "Answer", "Body"], rows))
    for text, statuses in failures.items():
        parts.append(f"**Errors** {', '.join(md.code(s) for s in statuses)}: {md.escape(text)} "
                     "See [error codes](errors.md).")
    return "\n\n".join(parts)


def _schema(schema: dict[str, Any], fields: bool = False) -> str:
    """A schema in a few words: its component's name, its type, or its fields."""
    if "$ref" in schema:
        return md.code(schema["$ref"].rsplit("/", 1)[-1]) + " (see the document)"
    if "const" in schema:
        return md.code(json.dumps(schema["const"]))
    if "enum" in schema:
        return " \\| ".join(md.code(json.dumps(v)) for v in schema["enum"])
    if "oneOf" in schema or "anyOf" in schema:
        return " or ".join(_schema(s) for s in schema.get("oneOf", schema.get("anyOf", [])))
    kind = schema.get("type", "any")
    shown = " or ".join(kind) if isinstance(kind, list) else str(kind)
    if schema.get("format"):
        shown += f" ({schema['format']})"
    if fields and kind == "object" and schema.get("properties"):
        required = set(schema.get("required", []))
        shown += " with " + ", ".join(md.code(name) + (" (required)" if name in required else "")
                                      for name in schema["properties"])
    return shown
