"""``cntk.io``'s sample-count constants (a leaf module: the source and the CNTK 2.0 compatibility layer share it)."""

INFINITELY_REPEAT = 2**64 - 1
FULL_DATA_SWEEP = 2**64 - 2
DEFAULT_RANDOMIZATION_WINDOW_IN_CHUNKS = 128
