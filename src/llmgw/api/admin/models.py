"""The admin API's catalog routes: `/admin/v1/models`, replicas and the cluster, admin keys only.
Every model answered is `Model.shown()`: a provider URL's credentials never leave the server."""

from __future__ import annotations

from typing import Any

from llmgw.api.appkeys import CATALOG, CLUSTER
from llmgw.api.endpoints import Call, Endpoint, who
from llmgw.core.errors import InvalidRequest
from llmgw.core.protocol.common import DataList, Removed
from llmgw.core.protocol.models import EstimateOut, FitOut, ModelOut, ReplicaQuery, ResourcesOut, ScaleRequest
from llmgw.core.protocol.nodes import ClusterOut
from llmgw.core.types import ApiKey, Model, Replica

TAG = "admin"
# Model names may contain '/', so the name pattern is greedy and the routes with a suffix come
# first.
NAME = "{name:.+}"
_HUB = {"kind": "hf", "repo": "unsloth/gemma-3-270m-it-GGUF", "file": "gemma-3-270m-it-Q4_K_M.gguf"}


def by(key: ApiKey | None) -> str:
    """Who made a change, as the catalog records it."""
    return who(key) if key else ""


def _server_set(payload: dict[str, Any], _params: object) -> dict[str, Any]:
    """A model body without the fields the server sets (a model read back may carry them)."""
    return {k: v for k, v in payload.items() if k not in ("by", "created_at", "updated_at")}


async def list_models(call: Call[None, None]) -> DataList[ModelOut]:
    catalog = call.app[CATALOG]
    models = await catalog.models()
    states = await catalog.states(models)
    return DataList(data=[ModelOut(**dict(m.shown()), state=states[m.name]) for m in models])


async def add_model(call: Call[Model, None]) -> Model:
    return (await call.app[CATALOG].add(call.body, by(call.key))).shown()


async def get_model(call: Call[None, None]) -> Model:
    return (await call.app[CATALOG].get(call.params["name"])).shown()


async def remove_model(call: Call[None, None]) -> Removed:
    name = call.params["name"]
    await call.app[CATALOG].remove(name)
    return Removed(name=name)


async def scale_model(call: Call[ScaleRequest, None]) -> Model:
    req = call.body
    if req.max is not None and req.max < req.min:
        raise InvalidRequest(f"max ({req.max}) is below min ({req.min})", param="max")
    idle = req.idle_s if "idle_s" in req.model_fields_set else ...
    model = await call.app[CATALOG].scale(call.params["name"], req.min, req.max, by(call.key), idle)
    return model.shown()


async def model_resources(call: Call[None, None]) -> ResourcesOut:
    res = await call.app[CATALOG].resources(call.params["name"])
    return ResourcesOut(
        model=res.model.shown(),
        placement=[FitOut(**dict(f)) for f in res.placement],
        replicas=res.replicas,
        nodes=res.nodes,
        estimates={name: EstimateOut(total_gb=e.total_gb, parts=e.parts(), describe=e.describe())
                   for name, e in res.estimates.items()},
        evictions=res.evictions,
    )


async def list_replicas(call: Call[None, ReplicaQuery]) -> DataList[Replica]:
    return DataList(data=await call.app[CATALOG].replicas(call.query.model))


async def cluster(call: Call[None, None]) -> ClusterOut:
    return await call.app[CLUSTER]()


LIST_MODELS = Endpoint("list_models", "GET", "/admin/v1/models",
                       "List catalog models with each one's on-demand state", TAG, list_models,
                       returns=DataList[ModelOut])
ADD_MODEL = Endpoint("add_model", "POST", "/admin/v1/models", "Add a catalog model", TAG, add_model,
                     body=Model, shape=_server_set, returns=Model, status=201,
                     example={"name": "gemma3-270m", "source": _HUB, "scaling": {"min": 0, "max": 1},
                              "profiles": [{"name": "cpu", "cpu_cores": 2, "min_memory_gb": 1}]})
MODEL_RESOURCES = Endpoint("model_resources", "GET", f"/admin/v1/models/{NAME}/resources",
                           "Placement and memory estimates", TAG, model_resources,
                           returns=ResourcesOut)
SCALE_MODEL = Endpoint("scale_model", "POST", f"/admin/v1/models/{NAME}/scale",
                       "Scale a model (min 0 and idle_s: on demand, stopped when idle)", TAG,
                       scale_model, body=ScaleRequest, returns=Model,
                       example={"min": 0, "max": 2, "idle_s": 600})
GET_MODEL = Endpoint("get_model", "GET", f"/admin/v1/models/{NAME}", "Show a catalog model", TAG,
                     get_model, returns=Model)
REMOVE_MODEL = Endpoint("remove_model", "DELETE", f"/admin/v1/models/{NAME}",
                        "Remove a catalog model", TAG, remove_model, returns=Removed)
LIST_REPLICAS = Endpoint("list_replicas", "GET", "/admin/v1/replicas", "List replicas", TAG,
                         list_replicas, query=ReplicaQuery, returns=DataList[Replica])
CLUSTER_STATUS = Endpoint("cluster_status", "GET", "/admin/v1/cluster",
                          "This server, the leader and its lease", TAG, cluster, returns=ClusterOut)

ENDPOINTS: list[Endpoint[Any, Any]] = [
    LIST_MODELS, ADD_MODEL, MODEL_RESOURCES, SCALE_MODEL, GET_MODEL, REMOVE_MODEL, LIST_REPLICAS,
    CLUSTER_STATUS,
]
