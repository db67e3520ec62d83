"""The ``cntk.io`` face of the core: ``MinibatchSource`` and the user-defined sources."""
