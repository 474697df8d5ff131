"""Collectors: turn native records (export files, live APIs) into evidence in the index."""
