"""Analyses: what a module or a tiling costs, computed without changing it. Passes and the driver
use them; none of them rewrites IR."""
