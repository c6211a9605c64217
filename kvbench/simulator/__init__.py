"""The simulated GPU: the step-time model, GPU presets and spec files, calibration against
measured profiles, and the `SimulatedExecutor` that advances a clock instead of computing.
Never imports torch."""
