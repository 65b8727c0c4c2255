"""Argument checks shared by the Trainer, its data and its hooks: one wording for each."""

from __future__ import annotations

from typing import Any

__all__ = ["check_int", "check_seconds"]


def check_int(name: str, value: Any, minimum: int) -> int:
    """`value` when it is an int (not a bool) >= minimum; else ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}, got {value!r}")
    return value


def check_seconds(name: str, value: Any) -> float:
    """`value` as float when it is a number of seconds > 0; else ValueError naming `name`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"{name} must be a number of seconds > 0, got {value!r}")
    return float(value)
