"""The broker's current metadata image, published atomically.

Readers (request threads) take ``cache.image``: one attribute read of an immutable
:class:`~metadata.image.MetadataImage`, no lock. The metadata thread is the only writer.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from metadata.image import MetadataImage


class MetadataCache:
    """Holds the latest :class:`MetadataImage`.

    Thread-safety: ``publish`` from one thread (the metadata loader); ``image`` from any thread without a
    lock; ``wait_for`` from any thread (it waits on a condition that ``publish`` notifies).
    """

    def __init__(self, image: MetadataImage | None = None) -> None:
        self.image = image if image is not None else MetadataImage()
        self._changed = threading.Condition()

    def publish(self, image: MetadataImage) -> None:
        assert image.offset >= self.image.offset, "metadata offsets never go back"
        self.image = image
        with self._changed:
            self._changed.notify_all()

    def wait_for(self, predicate: Callable[[MetadataImage], bool], timeout_s: float) -> bool:
        """Wait until ``predicate(image)`` holds (True) or ``timeout_s`` passes (False)."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while not predicate(self.image):
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
