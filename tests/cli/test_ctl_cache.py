"""`llmgw ctl cache …`, `ctl model cache` and `ctl route cache` against a running server."""

from __future__ import annotations

import json
from typing import Any

from tests.cli.test_ctl_guard import flat, row
from tests.support.server_process import LlmgwServer, run_cli


def ctl_json(server: LlmgwServer, *args: str) -> Any:
    return json.loads(server.ctl("--json", *args).stdout)


def test_a_models_own_cache_is_set_shown_and_given_back(bare_server: LlmgwServer) -> None:
    out = bare_server.ctl("model", "cache", "down-1", "--cache", "exact", "--cache-ttl", "2h",
                          "--shared").stdout
    assert "model down-1: cache exact 2h shared" in flat(out)
    (model,) = [m for m in ctl_json(bare_server, "model", "list")["data"] if m["name"] == "down-1"]
    assert model["cache"] == {"mode": "exact", "ttl_s": 7200.0, "shared": True}
    listed = run_cli("ctl", "model", "list", env={**bare_server.env, "COLUMNS": "200"}).stdout
    assert row(listed, "down-1")[7] == "exact 2h shared"

    assert "cache install's" in flat(bare_server.ctl("model", "cache", "down-1", "--inherit").stdout)
    bad = bare_server.ctl("model", "cache", "down-1", "--cache-ttl", "soon", check=False)
    assert bad.returncode == 2 and "30s, 10m or 2h" in flat(bad.stderr)
    both = bare_server.ctl("model", "cache", "down-1", "--inherit", "--cache", "off", check=False)
    assert both.returncode == 2 and "--inherit takes no other option" in flat(both.stderr + both.stdout)


def test_a_routes_own_cache_keeps_the_rest_of_the_route(bare_server: LlmgwServer) -> None:
    bare_server.ctl("route", "add", "cached", "--to", "down-1,down-2", "--attempts", "2")
    out = bare_server.ctl("route", "cache", "cached", "--cache", "semantic").stdout
    assert "route cached: cache semantic" in flat(out)
    route = ctl_json(bare_server, "route", "show", "cached")
    assert route["cache"]["mode"] == "semantic" and route["fallback"]["attempts"] == 2
    assert [t["model"] for t in route["targets"]] == ["down-1", "down-2"]
    bare_server.ctl("route", "remove", "cached")


def test_stats_and_purge(bare_server: LlmgwServer) -> None:
    stats = ctl_json(bare_server, "cache", "stats", "--days", "7")
    assert stats["mode"] == "off" and stats["store"] == "memory"
    assert "install's mode off (a model or route may set its own), kept in memory" in flat(
        bare_server.ctl("cache", "stats").stdout)
    assert "purged 0 answers of every model" in flat(bare_server.ctl("cache", "purge").stdout)
    out = bare_server.ctl("cache", "purge", "--model", "down-1").stdout
    assert "purged 0 answers of down-1" in flat(out)
    assert bare_server.ctl("cache", "stats", "--days", "0", check=False).returncode == 2


def test_stats_show_each_models_and_routes_own_mode_beside_the_installs(
        bare_server: LlmgwServer) -> None:
    # The install's cache is off, yet this model's and this route's answers are cached.
    bare_server.ctl("model", "cache", "down-2", "--cache", "exact", "--cache-ttl", "1h")
    bare_server.ctl("route", "add", "faq", "--to", "down-1")
    bare_server.ctl("route", "cache", "faq", "--cache", "semantic", "--shared")
    try:
        stats = ctl_json(bare_server, "cache", "stats")
        modes = {m["model"]: (m["mode"], m["own"]) for m in stats["models"]}
        assert stats["mode"] == "off"
        assert modes["down-2"] == ("exact", {"mode": "exact", "ttl_s": 3600.0, "shared": False})
        assert modes["faq"] == ("semantic", {"mode": "semantic", "ttl_s": None, "shared": True})
        shown = run_cli("ctl", "cache", "stats", env={**bare_server.env, "COLUMNS": "200"}).stdout
        assert "install's mode off" in flat(shown)
        assert row(shown, "down-2")[1:3] == ["exact", "exact 1h"]
        assert row(shown, "faq")[1:3] == ["semantic", "semantic shared"]
    finally:
        bare_server.ctl("model", "cache", "down-2", "--inherit")
        bare_server.ctl("route", "remove", "faq")
