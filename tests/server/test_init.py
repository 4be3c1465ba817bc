"""`server init`: what it creates, and that secrets are stored safely."""

from __future__ import annotations

import stat
from pathlib import Path

from llmgw.core.settings import load
from llmgw.server.init import init
from llmgw.store.store import Store


def test_init_creates_config_database_and_one_admin_key(tmp_path: Path) -> None:
    result = init(tmp_path / "data", port=9999)
    assert result.admin_key and result.admin_key.startswith("sk-llmgw-")
    assert any("database" in line for line in result.created)
    config = tmp_path / "data" / "config.toml"
    assert stat.S_IMODE(config.stat().st_mode) == 0o600
    assert load(tmp_path / "data").port == 9999


def test_the_key_is_stored_only_as_a_hash(tmp_path: Path) -> None:
    result = init(tmp_path / "data")
    assert result.admin_key
    raw = (tmp_path / "data" / "llmgw.db").read_bytes()
    assert result.admin_key.encode() not in raw
    settings = load(tmp_path / "data")
    store = Store.open(settings.database_url(tmp_path / "data"))
    [key] = store.keys.list()
    store.close()
    assert key.prefix == result.admin_key[:13] and key.last4 == result.admin_key[-4:]


def test_second_init_reports_what_exists_and_shows_no_key(tmp_path: Path) -> None:
    init(tmp_path / "data")
    again = init(tmp_path / "data")
    assert again.admin_key is None and again.created == []
    assert any(line.startswith("admin key sk-llmgw-") for line in again.existed)
