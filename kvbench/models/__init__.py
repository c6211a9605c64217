"""The Llama-architecture and Gemma decoders, their configuration, presets and weight loading."""
