"""Minibatches out of cached chunks: the native gather, ``MinibatchData`` and its layouts."""
