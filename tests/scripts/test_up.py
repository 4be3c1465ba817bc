"""`scripts/up.sh`: the examples it prints work in the virtualenv it installs."""

from __future__ import annotations

import ast
import re
import sys
import textwrap
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

from llmgw.engines.crashes import GAVE_UP

ROOT = Path(__file__).resolve().parents[2]
UP = ROOT / "scripts" / "up.sh"


def canonical(name: str) -> str:
    """A distribution name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_by_up() -> set[str]:
    """The distributions up.sh asks pip for: llmgw, its dependencies and the extras it names.

    The engine extra it may add is left out: it is skipped when llama-server is already there."""
    extras = re.findall(r"^ensure_venv\s+(\S+)(?:\s+cuda)?\s*$", UP.read_text(), re.MULTILINE)
    assert len(extras) == 1, "up.sh installs its extras with one `ensure_venv EXTRAS` line"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras[0].split(","):
        reqs += project["optional-dependencies"][extra]
    names = {canonical(project["name"])}
    for req in reqs:
        found = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", req)
        assert found, req
        names.add(canonical(found.group()))
    return names


def printed_python() -> str:
    """The program up.sh tells the user to feed to `.venv/bin/python`."""
    found = re.search(r"\.venv/bin/python - <<'PY'\n(.*?)\n\s*PY\n", UP.read_text(), re.DOTALL)
    assert found, "up.sh prints a python example"
    # As `cat <<TXT` prints it: a shell-escaped dollar reaches the user as a dollar.
    return textwrap.dedent(found.group(1)).replace("\\$", "$")


def imported_modules(source: str) -> set[str]:
    modules: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.add(node.module.split(".")[0])
    return modules


def test_every_module_the_printed_example_imports_is_installed_by_up() -> None:
    modules = imported_modules(printed_python()) - set(sys.stdlib_module_names)
    assert modules, "the example imports the openai client"
    providers = packages_distributions()
    installed = installed_by_up()
    missing = {
        m for m in modules
        if not {canonical(d) for d in providers.get(m, [])} & installed
    }
    assert not missing, f"up.sh prints an example importing {sorted(missing)}, which it does not install"


def test_up_installs_nvidias_binding_so_a_gpu_host_finds_its_gpus() -> None:
    assert "nvidia-ml-py" in installed_by_up()


def test_up_never_puts_the_admin_key_on_a_command_line() -> None:
    # Every user of the machine can read a process's argv; ctl takes the key from LLMGW_ADMIN_KEY.
    assert "--key" not in UP.read_text()


def test_the_printed_examples_paste_as_they_are_and_cap_the_answer() -> None:
    text = UP.read_text()
    block = text[text.index("cat <<TXT\n\nllmgw is running"):]
    # Flush left: an indented heredoc terminator is no terminator once pasted into bash, and an
    # indented program is an IndentationError.
    assert "\nPY\n" in block and "\n  PY\n" not in block
    assert "\nfrom openai import OpenAI\n" in block
    # The demo model would fill its whole context (a minute of repeated text) without a cap.
    assert '"max_tokens": 64' in block and "max_tokens=64" in block
    ast.parse(printed_python())


def test_ctrl_c_stops_the_script_not_only_the_server() -> None:
    [trap] = re.findall(r"^trap '(.*)' INT TERM$", UP.read_text(), re.MULTILINE)
    assert "kill -TERM $server" in trap and trap.rstrip(";").endswith("exit 130")


def test_up_stops_early_on_a_replica_llmgw_gave_up_on() -> None:
    # The wait recognises a given-up replica by the words the supervisor starts its reason with.
    assert f'startswith("{GAVE_UP}")' in UP.read_text()
    assert "llmgw doctor" in UP.read_text()


def test_up_says_the_demo_model_only_continues_text_and_how_to_serve_a_chat_model() -> None:
    text = UP.read_text()
    block = text[text.index("cat <<TXT\n\nllmgw is running"):]
    assert "not a chat model" in block and "continues the text" in block
    # Flush left, so it pastes as it is.
    assert re.search(r"^\.venv/bin/llmgw ctl model serve --repo \S+ --file \S+\.gguf .*--wait$",
                     block, re.MULTILINE)
