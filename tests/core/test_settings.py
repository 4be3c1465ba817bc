"""The install's config file: a broken one is refused without quoting what it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw.core.errors import ConfigError
from llmgw.core.settings import TelemetrySettings, dump, load


def test_an_invalid_config_names_the_field_but_never_quotes_its_value(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[server]\nkey_secret = 12345678901234567890\n'
        'databse = "postgresql+psycopg://llmgw:hunter2secret@db/llmgw"\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    message = caught.value.message
    assert "key_secret" in message and "databse" in message
    assert "hunter2secret" not in message and "12345678901234567890" not in message


def test_telemetry_is_off_until_an_otlp_endpoint_is_set_and_survives_a_rewrite(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[server]\nkey_secret = "ab"\n', encoding="utf-8")
    assert not load(tmp_path).telemetry.enabled
    (tmp_path / "config.toml").write_text(
        '[server]\nkey_secret = "ab"\n[control]\naudit_days = 30\n'
        '[telemetry]\notlp_endpoint = "http://collector:4318"\nsample_ratio = 0.25\n', encoding="utf-8")
    settings = load(tmp_path)
    assert settings.telemetry.traces_url == "http://collector:4318/v1/traces"
    assert settings.telemetry.sample_ratio == 0.25 and settings.control.audit_days == 30
    # `server init` writes the file with dump(): every table comes back as it was.
    (tmp_path / "config.toml").write_text(dump(settings), encoding="utf-8")
    assert load(tmp_path) == settings


@pytest.mark.parametrize(("endpoint", "url"), [
    ("http://collector:4318/", "http://collector:4318/v1/traces"),
    ("https://otlp.example.com/v1/traces", "https://otlp.example.com/v1/traces"),
])
def test_the_traces_path_is_added_once(endpoint: str, url: str) -> None:
    assert TelemetrySettings(otlp_endpoint=endpoint).traces_url == url


@pytest.mark.parametrize("endpoint", ["collector:4317", "grpc://collector:4317", "file:///tmp/x"])
def test_an_endpoint_that_is_not_otlp_over_http_is_refused(tmp_path: Path, endpoint: str) -> None:
    (tmp_path / "config.toml").write_text(
        f'[server]\nkey_secret = "ab"\n[telemetry]\notlp_endpoint = "{endpoint}"\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="telemetry.otlp_endpoint"):
        load(tmp_path)


def test_leader_timings_the_election_cannot_keep_are_refused_when_the_config_is_read(
        tmp_path: Path) -> None:
    # A server with them would serve on, never taking the lease, and say nothing.
    config = tmp_path / "config.toml"
    config.write_text('[server]\nkey_secret = "ab"\nleader_retry_s = 9\n', encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load(tmp_path)
    assert "leader_ttl_s > leader_renew_deadline_s > 1.2 × leader_retry_s" in caught.value.message
    config.write_text('[server]\nkey_secret = "ab"\nleader_retry_s = 5\n', encoding="utf-8")
    assert load(tmp_path).leader_retry_s == 5
