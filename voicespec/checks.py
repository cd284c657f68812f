"""Value checks in JSON's sense, shared by every reader of user input (CLI, batch lines, protocol)."""

import math
from typing import Any


def is_int(x: Any) -> bool:
    """An integer (``True`` is not one, though Python says it is)."""
    return isinstance(x, int) and not isinstance(x, bool)


def is_number(x: Any) -> bool:
    """A finite integer or float."""
    return is_int(x) or (isinstance(x, float) and math.isfinite(x))  # isfinite(int) overflows past 1e308
