"""Choosing where one request goes: plain data and small functions, below the way out.

1. **resolve** (`router.resolve`, `Router.targets`): the requested name to a catalog model's
   `table.Serving`, or a route's name to its targets;
2. **candidates** (`Router.states`, `cooldown`, `shared_cooldowns`): what is known of each
   target now (ready, in flight, cooling down after failures);
3. **pick** (`strategies.sift`, then `strategies.rank`, for a route's targets; `choice.pick` for
   a model's replicas): the order one request tries them in, and why each target left out is.

Each step is a small function of plain data (the time and randomness passed in). The attempt
itself, retried and falling back per the route's rules until a target answers, is the way out's
(`gateway.reach`)."""
