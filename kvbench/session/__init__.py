"""A benchmark session: options expanded into runs, each run's engine built and its workload
replayed by the runner, repeats interleaved, the fp8 accuracy section; the results go to
`kvbench.results` through its `SessionFolder` and `RunWriter`."""
