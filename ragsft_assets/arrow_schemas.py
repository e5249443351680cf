"""The Arrow column spellings the tables share: a run of columns of one type is named once.

Most tables are mostly string columns in a fixed order. ``strings("id", "split", "verdict")``
says that in one line, where one ``("name", pa.string())`` pair per column repeated the type on
every line. The fields are exactly what pyarrow makes of a ``(name, type)`` pair (nullable, no
metadata), in the order named, so a schema spelled either way is equal to the other.
"""

from __future__ import annotations

import pyarrow as pa

STRING_LIST = pa.list_(pa.string())
# One chat turn ({"role", "content"}), as every table of conversations stores its messages.
MESSAGE = pa.struct([("role", pa.string()), ("content", pa.string())])
MESSAGES = pa.list_(MESSAGE)


def columns(type_: pa.DataType, *names: str) -> list[pa.Field]:
    """Nullable columns of ``type_`` named ``names``, in that order."""
    return [pa.field(name, type_) for name in names]


def strings(*names: str) -> list[pa.Field]:
    """Nullable string columns named ``names``, in that order (the tables' most common column)."""
    return columns(pa.string(), *names)
