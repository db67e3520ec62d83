"""cntkio."""
