"""kafka-python's table of response classes kept to each API's primary class, so that two
threads decoding their first answer of one API version at once cannot leave it pointing to a
class that is gone.

kafka-python 3.0.12 finds the class that decodes an answer in a table keyed by API key, which
holds a weak proxy to the class. ``SomeResponse[version]`` makes a class per version on first
use, and that class registers itself in the table too (its metaclass drops the ``init=False``
that should stop it), replacing the entry. When two client I/O threads of one process make the
same version at once (two producers' first ``InitProducerId`` answers, say), each makes its own
class, only one is kept, and the table can end up with the proxy to the other one. Once the
garbage collector frees that class, every later answer of the API fails to decode
(``ReferenceError: weakly-referenced object no longer exists``, logged in the I/O thread), its
requests time out, and every producer of the process fails to initialise, for the rest of the
process's life. Seen in the test suite: every transactional producer of one pytest worker
failed for ten minutes.

Here a version's class no longer registers itself: the table keeps the primary class, which its
module holds for good, and entries already replaced are set back to it.
"""

from __future__ import annotations

import logging
import threading
import weakref
from typing import Any

__all__ = ["install_response_classes_kept"]

log = logging.getLogger(__name__)

_installed = False
_install_lock = threading.Lock()


def install_response_classes_kept() -> None:
    """Keep kafka-python's response class table to primary classes. Idempotent; applies to every
    client of the process.

    Checked against kafka-python 3.0.12: ``ResponseClassRegistry`` (kafka/protocol/api_header.py)
    has the class method ``register_response_class(response_class)`` storing
    ``weakref.proxy(cls)`` by ``API_KEY`` in ``_response_class_registry``; a version's class
    (``ApiMessage.__getitem__``) has a ``_class_version`` other than None, and ``cls[None]``
    gives its primary class; classes of the old protocol (kafka/protocol/old) have no
    ``_class_version``. An entry already dead when this runs (the race came first) cannot be
    mended: it is reported, and that API's answers stay undecodable in this process.
    """
    global _installed
    with _install_lock:
        if _installed:
            return
        from kafka.protocol.api_header import ResponseClassRegistry

        register = ResponseClassRegistry.register_response_class

        def register_primary_classes_only(response_class: Any) -> None:
            if not _version_class(response_class):
                register(response_class)

        ResponseClassRegistry.register_response_class = staticmethod(register_primary_classes_only)
        table = ResponseClassRegistry._response_class_registry
        for api_key, response_class in list(table.items()):
            try:
                if _version_class(response_class):
                    table[api_key] = weakref.proxy(response_class[None])
            except ReferenceError:
                log.error("kafka-python's response class for API key %s was freed before this process kept its "
                          "table: answers of that API cannot be decoded here; restart the process", api_key)
        _installed = True


def _version_class(response_class: Any) -> bool:
    """Whether it is one version's class (``SomeResponse[3]``) rather than an API's primary
    class (or a class of the old protocol, which has no versions). Checked against kafka-python
    3.0.12: ``_class_version`` is None on primary classes, the version on version classes."""
    return getattr(response_class, "_class_version", None) is not None
