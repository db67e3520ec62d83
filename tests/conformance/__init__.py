"""Conformance suite: CNTK's CTF reader unit tests replayed through cntkio's public API."""
