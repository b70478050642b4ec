"""The collectives between tensor-parallel ranks (FORWARD.md §3), as a small interface: all-reduce
max and sum over a group. Each rank may hold several vocabulary shards; `all_reduce` takes this
rank's value for each of its shards and returns the reduction over every shard of every rank, the
same array on every rank.

`InProcess` is the group of one process holding all the shards: the reduction runs over the list
in order (sums are deterministic). An MPI group implements the same method: reduce this rank's
shards locally, then MPI_Allreduce across ranks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol

import numpy as np

Reduction = Literal["max", "sum"]


class Group(Protocol):
    """Ranks that each hold shards of the vocabulary."""

    def all_reduce(self, values: Sequence[np.ndarray], op: Reduction) -> np.ndarray:
        """The max or sum, elementwise, of `values` (this rank's shards) over all shards of all ranks."""
        ...


class InProcess:
    """All shards in this process: reductions in shard order."""

    def all_reduce(self, values: Sequence[np.ndarray], op: Reduction) -> np.ndarray:
        if not values:
            raise ValueError("all_reduce: no shard to reduce")
        if op not in ("max", "sum"):
            raise ValueError(f"all_reduce: op must be 'max' or 'sum', got {op!r}")
        total = np.array(values[0], copy=True)
        for v in values[1:]:
            if op == "max":
                np.maximum(total, v, out=total)
            else:
                total += v
        return total
