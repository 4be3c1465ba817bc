"""The e2e fixtures live in tests/conftest.py so CLI and API tests can share the server."""
