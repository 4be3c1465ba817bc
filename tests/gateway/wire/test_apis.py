"""One record per API: every API has one, and what the edges say of a path agrees with it."""

from __future__ import annotations

from llmgw.api.errors import speaks_anthropic
from llmgw.api.hot_edge import HOT
from llmgw.gateway.cache.keys import CACHED_APIS
from llmgw.gateway.wire.apis import APIS
from llmgw.gateway.wire.dialect import Api


def test_every_api_has_one_record_and_one_path() -> None:
    assert set(APIS) == set(Api)
    assert len({spec.path for spec in APIS.values()}) == len(Api)


def test_the_edges_read_each_apis_path_dialect_and_heat_from_its_record() -> None:
    for api, spec in APIS.items():
        assert speaks_anthropic(spec.path, has_version_header=False) is spec.anthropic
        assert (HOT.get(spec.path.encode()) is api) is spec.hot
        assert (api in CACHED_APIS) is spec.cacheable
