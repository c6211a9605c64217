"""Wiring: an `EngineConfig` turned into an engine, with the model's, the simulator's or the
transformers baseline's executor factory. The one place that knows every engine kind."""
