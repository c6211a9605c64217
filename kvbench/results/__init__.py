"""The results schema: the `Summary` and its metric catalogue, per-request metrics, token
times, `steps.csv` writing, repeats' statistics, the vLLM export and atomic folder writes.
The session writes it, the report and `kvbench compare` read it."""
