"""HTML reports and run-to-run comparisons built from results folders (docs/design.md, Results).

- `runs`: read results folders into `RunData` (a comparison folder expands into its runs);
- `metrics`: the named metrics (`output_tok_s`, `ttft.p99`, ...), differences, `--fail-on`;
- `style`, `tables`, `charts`, `timelines`: the pieces of a report;
- `page`: the self-contained HTML page (`kvbench.report.writer.write_report` is the entry point).
"""
