"""The stages of the request path (`chain`), one module each, independent of each other:
`limits` (admission), `cache` (the response cache), `queue` (waiting for a cold model's
replica) and `guard` (judging input and output), in that order."""
