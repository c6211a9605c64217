"""HTML reports and run-to-run comparisons built from results folders, or from the runs a
session hands over (`runs.collect_runs`); charts are plain plotly.js JSON (docs/reports.md)."""
