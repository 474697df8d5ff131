"""Shipped rule packs (data). An __init__ keeps importlib.resources working in every install."""
