"""Hardware descriptions (targets) as data."""

from npugrad.targets.target import MemoryLevel, Target, TargetError, from_dict, get, host, load

__all__ = ["MemoryLevel", "Target", "TargetError", "from_dict", "get", "host", "load"]
