"""The suite's support code: the real processes and services tests run against (llmgw servers
and clusters, a local Hub, a browser, PostgreSQL, Redis, an OpenID provider) and the isolation
that keeps every one of them off the user's install. The root conftest imports the fixtures."""
