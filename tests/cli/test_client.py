"""The admin client ctl uses: a broken key is a clear error that never quotes the key."""

from __future__ import annotations

import pytest

from llmgw.cli.client import AdminClient, CtlError


def test_a_key_with_a_control_character_is_refused_without_quoting_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LLMGW_ADMIN_KEY", "sk-llmgw-s3cretvalue\nx")
    with pytest.raises(CtlError) as caught:
        AdminClient.resolve("http://127.0.0.1:9", None)
    assert "control character" in str(caught.value) and "s3cretvalue" not in str(caught.value)


def test_a_client_never_shows_its_key_in_a_repr() -> None:
    client = AdminClient.resolve("http://127.0.0.1:9", "sk-llmgw-s3cretvalue\n")
    assert client.key == "sk-llmgw-s3cretvalue"
    assert "s3cretvalue" not in repr(client)
