"""The explanation engine: evidence in, one Explanation model out."""
