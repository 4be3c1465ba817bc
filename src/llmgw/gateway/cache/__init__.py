"""The response cache, on the request path: which requests it may answer (`keys`), what it keeps
of an answer (`entry`), where it keeps it (`memory`, `shared` in the install's Redis), how a kept
answer is replayed in the caller's dialect (`replay`), and the service that ties them to one
request (`service`)."""
