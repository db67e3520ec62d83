"""CNTK 2.0 to 2.7 spellings, translated at the edge before the core is called."""
