"""KV sizing without torch: the budget, the capacity and `kvbench estimate`'s arithmetic."""
