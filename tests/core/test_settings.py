"""The install's config file: a broken one is refused without quoting what it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.core.errors import ConfigError
from llmgw.core.settings import load


def test_an_invalid_config_names_the_field_but_never_quotes_its_value(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[server]\nkey_secret = 12345678901234567890\n'
        'databse = "postgresql+psycopg://llmgw:hunter2secret@db/llmgw"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    message = caught.value.message
    assert "key_secret" in message and "databse" in message
    assert "hunter2secret" not in message and "12345678901234567890" not in message
