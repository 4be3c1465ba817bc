"""The web console at `/ui`: server-rendered pages over the same services and checks as the API."""
