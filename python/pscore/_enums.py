"""The C++ enums the extension modules export (py::enum_, upper-case members), looked up by the
lower-case names users pass ("sum", "float32", "adagrad"): Python keeps no table of their
numbers."""

from __future__ import annotations

from typing import Any


def by_name(enum_type: Any) -> dict[str, Any]:
    """{lower-cased member name: member} of an exported C++ enum, in declaration order."""
    return {name.lower(): member for name, member in enum_type.__members__.items()}


def name_of(member: Any) -> str:
    """The lower-case name of an exported enum member (the inverse of by_name)."""
    return member.name.lower()
