"""The shared kernel: evidence model, entities, taxonomy, settings, errors and the index."""
