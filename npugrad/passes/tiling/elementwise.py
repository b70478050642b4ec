"""Tiling of elementwise for tile-for-target (being written)."""
