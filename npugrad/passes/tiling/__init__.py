"""Per-op tilings, used through the ops' recipes: each module sizes an op's tiles for a target
(choose_tile_sizes, footprint), tiles it into local buffers, and spreads it over cores."""
