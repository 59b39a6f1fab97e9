"""Client-given names, quoted in error messages and cut short.

Names are client data of any count and length: a 23 MB REST body holds a million output
names, and one name can be megabytes. An error that quoted them all was a 15 MB body,
built on the event loop. So a message quotes a handful of names, each cut short, and
counts the rest.
"""

from __future__ import annotations

from collections.abc import Sequence

QUOTED_NAMES = 5  # names a message lists before it counts the rest
QUOTED_CHARS = 64  # characters of one name a message shows


def quote(names: Sequence[str], total: int | None = None) -> str:
    """The first few of `total` names (default: all of `names`) as a list, then how many
    more there are."""
    shown = [name[:QUOTED_CHARS] for name in names[:QUOTED_NAMES]]
    rest = (len(names) if total is None else total) - len(shown)
    return f"{shown} and {rest} more" if rest > 0 else str(shown)


def quote_name(name: str) -> str:
    """One name, quoted and cut short."""
    return repr(name[:QUOTED_CHARS])
