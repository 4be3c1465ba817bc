"""The MCP project's own conformance suite (npm `@modelcontextprotocol/conformance`, pinned in
tests/mcp_npm with the Node.js it runs on; see tests/support/mcp_everything.py) run against a server's
streamable HTTP endpoint: its server scenarios connect as a client and check what the server
answers. `run_conformance` runs it and reads each scenario's `checks.json` back into pass/fail.

The CLI has no option for headers: for an endpoint that wants a key (llmgw's `/mcp`),
`tests/mcp_npm/bearer.mjs` is preloaded and adds `Authorization: Bearer KEY` to every request it
makes."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.support.mcp_everything import MCP_DIR, MODULES, mcp_node

CLI = MODULES / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
BEARER = MCP_DIR / "bearer.mjs"
RUN_TIMEOUT_S = 300.0
# The CLI saves each scenario's checks in OUT/server-SCENARIO-TIMESTAMP/checks.json.
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T[\d-]+Z$")


@dataclass(frozen=True)
class Check:
    """One check of a scenario, as the suite reports it: status SUCCESS, FAILURE, WARNING, INFO
    or SKIPPED; `error` is its errorMessage."""

    id: str
    status: str
    error: str = ""


@dataclass(frozen=True)
class Scenario:
    """A scenario's checks; it passed when none of them failed (the CLI's own rule)."""

    name: str
    checks: tuple[Check, ...]

    @property
    def passed(self) -> bool:
        """No check failed and at least one ran."""
        return bool(self.checks) and all(c.status != "FAILURE" for c in self.checks)

    def failures(self) -> list[str]:
        """`id: error` of each failed check."""
        return [f"{c.id}: {c.error}" for c in self.checks if c.status == "FAILURE"]


@dataclass(frozen=True)
class ConformanceRun:
    """What one run of the suite reported, by scenario; `output` is the CLI's own summary."""

    scenarios: dict[str, Scenario]
    output: str

    def passed(self) -> list[str]:
        """The scenarios that passed, sorted."""
        return sorted(name for name, s in self.scenarios.items() if s.passed)

    def failed(self) -> list[str]:
        """The scenarios that failed, sorted."""
        return sorted(name for name, s in self.scenarios.items() if not s.passed)

    def report(self) -> str:
        """One line per scenario, failed checks with their errors: for an assertion message."""
        lines = []
        for name in sorted(self.scenarios):
            scenario = self.scenarios[name]
            lines.append(f"{'pass' if scenario.passed else 'FAIL'} {name}")
            lines.extend(f"    {failure}" for failure in scenario.failures())
        return "\n".join(lines)


def read_results(out_dir: Path) -> dict[str, Scenario]:
    """The scenarios saved under `out_dir` by one run of the CLI's `server` command."""
    scenarios: dict[str, Scenario] = {}
    for checks_file in sorted(out_dir.glob("server-*/checks.json")):
        match = _RESULT_DIR.match(checks_file.parent.name)
        assert match, f"unexpected result directory {checks_file.parent}"
        raw = json.loads(checks_file.read_text())
        checks = tuple(Check(str(c["id"]), str(c["status"]), str(c.get("errorMessage") or ""))
                       for c in raw)
        scenarios[match["scenario"]] = Scenario(match["scenario"], checks)
    return scenarios


def conformance_command(url: str, out_dir: Path, scenario: str | None = None,
                        bearer: bool = False) -> list[str]:
    """The command line that runs the suite's server scenarios (its active suite, or one
    `scenario`) against `url`, saving results under `out_dir`."""
    node = str(mcp_node())
    preload = ["--import", BEARER.as_uri()] if bearer else []
    command = [node, *preload, str(CLI), "server", "--url", url, "--output-dir", str(out_dir)]
    return [*command, "--scenario", scenario] if scenario else command


def run_conformance(url: str, out_dir: Path, *, scenarios: Sequence[str] = (),
                    bearer: str | None = None, timeout_s: float = RUN_TIMEOUT_S) -> ConformanceRun:
    """Run the suite against the MCP endpoint at `url`: its whole active suite, or only
    `scenarios`, with `Authorization: Bearer BEARER` on every request when `bearer` is given.
    The CLI exits 1 when a scenario fails: that is a result, not an error; a run that saved no
    results is."""
    out_dir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "MCP_CONFORMANCE_BEARER": bearer} if bearer else dict(os.environ)
    output: list[str] = []
    for scenario in scenarios or (None,):
        proc = subprocess.run(
            conformance_command(url, out_dir, scenario, bearer=bearer is not None),
            env=env, cwd=out_dir, capture_output=True, text=True, timeout=timeout_s)
        output.append(proc.stdout + proc.stderr)
        if proc.returncode not in (0, 1):
            raise AssertionError(f"the conformance suite exited {proc.returncode}:\n{output[-1]}")
    run = ConformanceRun(read_results(out_dir), "\n".join(output))
    assert run.scenarios, f"the conformance suite saved no results:\n{run.output}"
    missing = set(scenarios) - set(run.scenarios)
    assert not missing, f"no results for {sorted(missing)}:\n{run.output}"
    return run
