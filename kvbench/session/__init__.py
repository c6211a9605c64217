"""A benchmark session: options expanded into runs, each run replayed through its engine by
the runner, repeats interleaved, the fp8 accuracy section, and the results folder."""
