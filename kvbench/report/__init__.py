"""HTML reports and run-to-run comparisons built from results folders (docs/design.md, Results).

- `runs`: `RunData`, read from results folders (a comparison folder expands into its runs) or
  handed over by the session that ran them (`collect_runs`);
- `metrics`: the named metrics (`output_tok_s`, `ttft.p99`, ...), differences, `--fail-on`;
- `style`, `tables`, `charts`, `step_charts`, `timelines`: the pieces of a report;
- `figure`, `figure_json`, `figure_html`, `plotly_assets`: charts as plain plotly.js JSON
  (no `plotly.graph_objects`), on the page with plotly.js inlined once (docs/reports.md);
- `page`: the self-contained HTML page (`kvbench.report.writer` writes it; its shell also
  holds a sweep's report), its sections one table (`SECTIONS`).
"""
