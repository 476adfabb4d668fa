"""Scale-out: independent tasks (one rank of one step, one share of APIs) on local processes or a Ray cluster,
with retries and resume (docs/scaling.md)."""
