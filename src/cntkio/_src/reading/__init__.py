"""The reading engine: cursor, chunk cache, memory budget, BPTT slots, checkpoints, stage timings."""
