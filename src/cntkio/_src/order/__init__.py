"""Sequence orders: pure functions of (table, configuration, seed, sweep, partition)."""
