"""The generated reference is complete: every command and option, configuration key, environment
variable, HTTP operation, metric and error code has its entry, with a description.

Each test finds what exists on its own (the command tree, the settings models and the file
`server init` writes, the OpenAPI document, a real scrape, the codes the source sets) rather than
from what the generator lists, and looks for it in the Markdown the generator makes."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest
import typer
import typer.main
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel

from docsgen import cli, reference
from llmgw.api.edge import EDGE_CODES
from llmgw.api.registry import spec
from llmgw.cli.main import app
from llmgw.core import errors, settings
from llmgw.core.clock import SystemClock
from llmgw.gateway.gpu_metrics import GpuMetrics
from llmgw.gateway.metrics import FAMILIES, LABELS, Metrics
from llmgw.gateway.replica_signals import ReplicaSignals
from llmgw.gateway.route_metrics import RouteMetrics
from llmgw.gateway.shared_limits import DegradedMetric
from llmgw.gateway.upstream.router import Router
from llmgw.gateway.upstream.table import RoutingTable, Serving
from llmgw.server.node_run import NodeConfig
from tests.factories import local_model

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "llmgw"
METHODS = {"get", "put", "post", "delete", "patch", "options", "head", "trace"}
_HEADING = re.compile(r"^(#{2,6}) (?P<title>.+?) \{#(?P<id>[^}]+)\}$", re.MULTILINE)


def sections(page: str) -> dict[str, tuple[str, str]]:
    """Each heading's id → (its title, the text up to the next heading)."""
    found = list(_HEADING.finditer(page))
    return {m["id"]: (m["title"], page[m.end():found[i + 1].start() if i + 1 < len(found) else None])
            for i, m in enumerate(found)}


def titled(page: str) -> dict[str, str]:
    """Each heading's title (code marks dropped) → the text under it."""
    return {title.strip("`"): body for title, body in sections(page).values()}


# --- commands ------------------------------------------------------------------------------


def every_command(command: Any, path: str, parent: Any = None) -> list[tuple[str, Any, Any]]:
    """(path, command, context) of every command of the tree typer builds, by what a group has
    (typer builds it on its own copy of click's classes)."""
    ctx = command.context_class(command, info_name=path.rsplit(" ", 1)[-1], parent=parent)
    found = [(path, command, ctx)]
    for name in getattr(command, "list_commands", lambda _c: [])(ctx):
        found += every_command(command.get_command(ctx, name), f"{path} {name}", ctx)
    return found


def cli_gaps(tree: typer.Typer, page: str, name: str = "llmgw") -> list[str]:
    """What of `tree` the commands page lacks, or lacks a description for."""
    gaps = []
    by_title = titled(page)
    for path, command, ctx in every_command(typer.main.get_command(tree), name):
        if command.hidden:
            continue
        if not (command.help or "").strip():
            gaps.append(f"{path}: no help")
        section = by_title.get(path)
        if section is None:
            gaps.append(f"{path}: no entry")
            continue
        for param in command.get_params(ctx):
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            label = f"{path} {param.opts[0] if param.param_type_name == 'option' else param.name}"
            if not (getattr(param, "help", None) or "").strip():
                gaps.append(f"{label}: no help")
            shown = [f"`{o}`" for o in param.opts] if param.param_type_name == "option" \
                else [f"`{str(param.name).upper()}"]
            if not all(s in section for s in shown):
                gaps.append(f"{label}: not in its entry")
    return gaps


def test_every_command_argument_and_option_has_its_entry_with_a_description() -> None:
    page = reference.render("cli")
    assert cli_gaps(app, page) == []
    assert "`--help`" in page  # every command's, said once


def test_a_command_or_option_without_help_is_reported_by_name() -> None:
    tiny = typer.Typer(help="A tiny CLI.")

    @tiny.command()
    def documented(flag: bool = typer.Option(False, help="Does a thing.")) -> None:
        """Has help."""

    @tiny.command()
    def bare(level: int = typer.Option(1)) -> None:
        pass

    gaps = cli_gaps(tiny, cli.render(tiny, "tiny"), "tiny")
    assert gaps == ["tiny bare: no help", "tiny bare --level: no help"]


def test_a_command_missing_from_the_page_is_reported() -> None:
    assert "llmgw ctl model add: no entry" in cli_gaps(app, "")


def test_hidden_commands_and_options_are_left_out_and_said_to_be() -> None:
    tiny = typer.Typer(help="A tiny CLI.")

    @tiny.command()
    def shown(secret: int = typer.Option(1, hidden=True), plain: int = typer.Option(
            1, help="Plain.")) -> None:
        """Shown."""

    @tiny.command(hidden=True)
    def internal() -> None:
        """Internal."""

    page = cli.render(tiny, "tiny")
    assert "tiny internal" not in titled(page) and "`--secret`" not in page
    assert "`--plain`" in page
    assert "2 hidden command(s) or option(s) are left out" in page


# --- configuration -------------------------------------------------------------------------


def written_config() -> dict[str, dict[str, Any]]:
    """config.toml as `server init` writes it: every table and key the server reads."""
    return tomllib.loads(settings.dump(settings.ServerSettings(key_secret="ab")))


def models_of(model: type[BaseModel]) -> list[type[BaseModel]]:
    nested = [f.annotation for f in model.model_fields.values()
              if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)]
    return [model, *[m for n in nested for m in models_of(n)]]


def test_every_key_of_config_toml_has_its_entry_in_its_table() -> None:
    page = sections(reference.render("config"))
    tables = written_config()
    assert set(tables) == {"server", "control", "telemetry", "limits", "sso", "cache"}
    for table, keys in tables.items():
        assert f"table-{table}" in page, f"no [{table}] table on the page"
        for key in keys:
            entry = page.get(f"{table}-{key}")
            assert entry is not None, f"[{table}] {key} has no entry"
            assert entry[0] == f"`{key}`"
            assert "**Default**" in entry[1] and "**Type**" in entry[1]


def test_every_table_the_page_lists_is_one_the_server_reads(tmp_path: Path) -> None:
    # An unknown key is refused only in a table the server reads: one it ignores loads fine.
    listed = [ident.removeprefix("table-") for ident in sections(reference.render("config"))
              if ident.startswith("table-") and ident != "table-node"]
    assert listed == ["server", "control", "telemetry", "limits", "sso", "cache"]
    for table in listed:
        body = {"server": 'key_secret = "ab"\n'}
        body[table] = body.get(table, "") + "not_a_key = 1\n"
        (tmp_path / settings.CONFIG_FILE).write_text("".join(f"[{t}]\n{b}" for t, b in body.items()))
        with pytest.raises(errors.ConfigError, match="not_a_key"):
            settings.load(tmp_path)


def test_every_settings_field_has_a_description() -> None:
    missing = [f"{model.__name__}.{name}" for model in [*models_of(settings.ServerSettings), NodeConfig]
               for name, field in model.model_fields.items() if not (field.description or "").strip()]
    assert missing == []


def test_the_node_agents_file_has_every_key() -> None:
    page = sections(reference.render("config"))
    for key in NodeConfig.model_fields:
        assert f"node-{key}" in page, f"[node] {key} has no entry"


def test_bounds_and_defaults_are_the_models() -> None:
    page = sections(reference.render("config"))
    assert "**Bounds** > 0, ≤ 300" in page["control-keeper_interval_s"][1]
    assert '**Default** `"local"`' in page["limits-on_redis_error"][1]
    assert "**Default** required" in page["server-key_secret"][1]


def test_every_environment_variable_the_code_reads_is_listed() -> None:
    named = set()
    for path in SRC.rglob("*.py"):
        named |= set(re.findall(r"\bLLMGW_[A-Z0-9_]*", path.read_text(encoding="utf-8")))
    page = sections(reference.render("config"))["environment"][1]
    for name in sorted(named):
        listed = f"`{name}*`" if name.endswith("_") else f"`{name}`"
        assert listed in page, f"{name} is read but not listed"


# --- HTTP API ------------------------------------------------------------------------------


def test_every_operation_of_the_openapi_document_has_its_entry() -> None:
    doc = spec()
    by_title = titled(reference.render("http-api"))
    for path, item in doc["paths"].items():
        for method, op in item.items():
            if method not in METHODS:
                continue
            assert op.get("summary", "").strip(), f"{method} {path} has no summary"
            entry = by_title.get(f"{method.upper()} {path}")
            assert entry is not None, f"{method.upper()} {path} has no entry"
            assert f"**Access** `{op['x-llmgw-access']}`" in entry


def test_every_tag_and_access_is_described() -> None:
    doc = spec()
    assert all(t.get("description") for t in doc["tags"]), doc["tags"]
    used = {op["x-llmgw-access"] for item in doc["paths"].values()
            for method, op in item.items() if method in METHODS}
    assert used <= set(doc["x-llmgw-access"])


def test_the_document_is_published_beside_the_page() -> None:
    published = reference.files()["reference/openapi.json"]
    assert json.loads(published) == spec()


# --- metrics -------------------------------------------------------------------------------


def scrape() -> str:
    """A scrape of a process with every collector a server registers (a model, a route, the
    shared limit store's gauge, the nodes' GPUs)."""
    table = RoutingTable({"m": Serving(local_model("m"), ())})
    metrics = Metrics(lambda: table)
    metrics.add_collector(RouteMetrics(Router(SystemClock()), dict, SystemClock()))
    metrics.add_collector(DegradedMetric(cast(Any, SimpleNamespace(degraded=False))))
    metrics.add_collector(GpuMetrics(list, SystemClock(), timedelta(seconds=30)))
    metrics.add_collector(ReplicaSignals(lambda: table))
    return metrics.render().decode()


def metric_names_in_source() -> set[str]:
    """The first argument of every metric family the source makes."""
    names = set()
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if func == "Family" or func.endswith("MetricFamily"):
                    names.add(str(node.args[0].value))
    return names


def test_every_metric_a_scrape_shows_has_its_entry_with_its_help() -> None:
    page = reference.render("metrics")
    families = list(text_string_to_metric_families(scrape()))
    assert len(families) == len(FAMILIES)  # the table is every family the collectors yield
    for family in families:
        assert family.documentation.strip(), f"{family.name} has no help"
        shown = family.name + "_total" if family.type == "counter" else family.name
        assert f"`{shown}`" in page, f"{shown} has no entry"
        assert family.documentation in page


def test_every_metric_family_made_in_the_source_has_its_entry() -> None:
    page = reference.render("metrics")
    names = metric_names_in_source()
    assert "llmgw_requests" in names and "llmgw_limits_degraded" in names
    for name in names:
        assert f"`{name}" in page, f"{name} has no entry"


def test_every_label_is_described() -> None:
    used = {label for family in FAMILIES for label in family.labels}
    assert used <= {label for label, text in LABELS.items() if text.strip()}


# --- error codes ---------------------------------------------------------------------------


def codes_in_source() -> set[str]:
    """Every error code the source sets: a class's `code`, a `code=` argument, the `code`
    parameter of a call by position, a value assigned to `code`."""
    trees = [ast.parse(p.read_text(encoding="utf-8")) for p in SRC.rglob("*.py")]
    position: dict[str, int] = {}
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in (*node.args.posonlyargs, *node.args.args)]
                if "code" in names:
                    position[node.name] = names.index("code") - (names[:1] in (["self"], ["cls"]))

    def text(node: ast.AST) -> str | None:
        return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None

    found: set[str | None] = set()
    for tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                found |= {text(kw.value) for kw in node.keywords if kw.arg == "code"}
                func = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                if func in position and position[func] < len(node.args):
                    found.add(text(node.args[position[func]]))
            elif isinstance(node, ast.Assign):
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id == "code":
                        found.add(text(node.value))
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple):
                        found |= {text(v) for t, v in zip(target.elts, node.value.elts, strict=False)
                                  if isinstance(t, ast.Name) and t.id == "code"}
    return {code for code in found if code}


def test_every_error_code_the_source_sets_has_its_entry() -> None:
    page = sections(reference.render("errors"))
    codes = codes_in_source()
    assert {"shared_store_down", "rate_limit_rpm", "too_many_connections", "timeout"} <= codes
    for code in sorted(codes):
        assert code in page, f"{code} has no entry"
        assert f'"code": "{code}"' in page[code][1], f"{code}'s entry does not show its body"


def test_every_error_has_a_description() -> None:
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, errors.LlmgwError)]
    assert [c.__name__ for c in classes if not (c.__dict__.get("__doc__") or "").strip()] == []
    others = {code: when for c in classes for code, when in c.__dict__.get("other_codes", {}).items()}
    assert [code for code, when in others.items() if not when.strip()] == []
    assert [code for code, edge in EDGE_CODES.items() if not edge.when.strip()] == []


def test_an_error_shows_its_status_and_both_dialects() -> None:
    entry = sections(reference.render("errors"))["shared_store_down"][1]
    assert "**HTTP status** 503" in entry and "**Retry** yes" in entry
    assert '=== "OpenAI shape"' in entry and '"type": "overloaded_error"' in entry  # Anthropic's


# --- the site ------------------------------------------------------------------------------


def test_the_site_builds_strict_with_the_generated_reference(tmp_path: Path) -> None:
    out = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-4000:]}"
    built = {page: (out / "reference" / page / "index.html").read_text(encoding="utf-8")
             for page in ("cli", "config", "http-api", "metrics", "errors")}
    assert "llmgw server run" in built["cli"] and "--judge-node" in built["cli"]
    assert "redis_url" in built["config"] and "LLMGW_DATA_DIR" in built["config"]
    assert "/v1/chat/completions" in built["http-api"]
    assert "llmgw_requests_total" in built["metrics"]
    assert "shared_store_down" in built["errors"]
    assert json.loads((out / "reference" / "openapi.json").read_bytes())["openapi"].startswith("3.1")


@pytest.mark.parametrize("name", sorted(reference.PARTS))
def test_every_part_renders_without_a_stray_marker(name: str) -> None:
    assert "<!-- llmgw:reference" not in reference.render(name)
