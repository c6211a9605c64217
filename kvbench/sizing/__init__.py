"""Sizing: the KV budget, the capacity it buys, and `kvbench estimate`'s figures, computed
without running anything. Never imports torch."""
