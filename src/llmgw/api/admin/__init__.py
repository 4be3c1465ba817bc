"""The admin API, `/admin/v1/*`: one module per resource it serves, named after it (`models`:
the catalog, its replicas and the cluster; `keys`: keys, default limits and usage; `routes`,
`teams`, `users`, `nodes`, `jobs`, `guard`, `cache`, `audit`)."""
