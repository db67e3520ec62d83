"""The ``cntkio`` command line: one module per command."""
