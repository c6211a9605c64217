"""The results folder and its schema. A session enters through `SessionFolder` (its folder,
renamed whole last) and each run's `RunWriter` (streaming, summarizing and writing the run's
files); the report and `kvbench compare` read folders back (`run_folder`: whether they are
whole), and `export` writes them in vLLM's formats."""
