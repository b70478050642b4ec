"""Tiling of nll for tile-for-target (being written)."""
