"""BrainScript reader sections: syntax, keys, and the readers they build."""
