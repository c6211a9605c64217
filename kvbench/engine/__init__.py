"""The engine loop: each step schedules (a `BatchingPolicy`), builds the batch, executes it
(an `Executor`) and commits the sampled tokens; the `CacheStrategy` keeps the books."""
