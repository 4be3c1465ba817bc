"""The admin API's wire models: what each `/admin/v1` endpoint takes and answers, one module per
concern (models and serve jobs, nodes and the cluster, the guard, keys and teams, routes, the
audit log, people).

Shared by the server, `ctl` and the console, so a field is named once. They import only pydantic
and llmgw.core (ctl loads them without the web framework); domain types (Model, Limits, Policy,
...) stay where they are and appear here as fields or bases.
"""
