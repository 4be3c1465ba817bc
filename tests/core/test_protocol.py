"""The wire models: they say what the domain types they mirror hold, and never a key's hash."""

from __future__ import annotations

from typing import get_args

from llmgw.control.node_admin import NodeState
from llmgw.core.protocol.keys import KeyOut, UsageRowOut
from llmgw.core.protocol.models import FitOut, JobOut, ServeJob, ServeRequest
from llmgw.core.protocol.nodes import NodeStatus
from llmgw.core.types import ApiKey, Fit, LocalSource, UsageRow
from tests.factories import user_key


def test_the_mirrors_name_the_same_fields_as_what_they_mirror() -> None:
    assert set(get_args(NodeStatus)) == {s.value for s in NodeState}
    assert issubclass(FitOut, Fit) and list(FitOut.model_fields) == list(Fit.model_fields)
    assert issubclass(UsageRowOut, UsageRow)
    assert list(UsageRowOut.model_fields) == [*UsageRow.model_fields, "key_name"]
    assert set(KeyOut.model_fields) == set(ApiKey.model_fields) - {"hash"} | {"label", "live"}


def test_a_key_on_the_wire_never_carries_its_hash() -> None:
    _, key = user_key(name="alice")
    shown = KeyOut.of(key).model_dump(mode="json")
    assert "hash" not in shown and key.hash not in str(shown)
    assert shown["label"] == key.label and shown["name"] == "alice"


def test_a_job_names_its_model_and_reads_back_from_its_own_answer() -> None:
    job = ServeJob(id="job-1", request=ServeRequest(name="tiny", source=LocalSource(path="/t.gguf")))
    shown = JobOut(**dict(job)).model_dump(mode="json")
    assert shown["model"] == "tiny"
    assert JobOut.model_validate(shown).request == job.request
