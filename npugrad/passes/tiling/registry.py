"""op class -> tile(op, target)."""

from __future__ import annotations

from collections.abc import Callable

TILINGS: dict[type, Callable] = {}
