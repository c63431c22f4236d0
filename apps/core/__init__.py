"""Shared, model-free building blocks that every app may use (the lowest layer)."""
