"""Tiling of flce for tile-for-target (being written)."""
