"""What every layer shares: errors, key columns, stream declarations, array helpers, thread settings."""
