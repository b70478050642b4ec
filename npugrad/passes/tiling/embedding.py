"""Tiling of embedding for tile-for-target (being written)."""
