"""A selector that says "not registered" without formatting the socket.

kafka-python's I/O loop asks its selector for a socket's registration before each wait on it
(``NetworkSelector.register_event`` calls ``get_key`` and registers on KeyError), and "not
registered" is the common answer. The standard library's ``get_key`` then formats
``repr(socket)`` into the KeyError's message, twice, and a socket's repr makes system calls
(its local and peer address): about 2 ms of CPU per exactly-once commit in the producer's I/O
thread, and the same on every fetch in the consumer's (py-spy; checked against kafka-python
3.0.12 and CPython 3.11). kafka-python takes the selector class as its documented ``selector``
setting.
"""

from __future__ import annotations

import selectors
from typing import Any

__all__ = ["CheapLookupSelector"]


class CheapLookupSelector(selectors.DefaultSelector):
    """``selectors.DefaultSelector`` whose ``get_key`` of an unregistered file object raises a
    KeyError holding the object itself (its repr is built only if someone prints it)."""

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        if self.get_map() is None:
            raise RuntimeError("Selector is closed")
        # the look-up get_map()[fileobj] makes, without its message (CPython's selectors
        # module, unchanged from 3.4 to 3.13)
        key = self._fd_to_key.get(self._fileobj_lookup(fileobj))  # type: ignore[attr-defined]
        if key is None:
            raise KeyError(fileobj)
        return key
