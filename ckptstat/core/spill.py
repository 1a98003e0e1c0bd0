"""One item's bytes kept in an anonymous temporary file while a reader reads it chunk after chunk: a deflated
`model.weights.h5` of a `.keras` (formats/keras_zip.py), a protocol-2 pickle's array decoded from its latin-1 text
(formats/latin1.py). The file is made again for another item, and by a forked process (a `stats` worker: no file
offset shared with its parent, whose copy it leaves open); `close()` releases it."""
from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Hashable
from typing import IO


class KeptSpill:
    def __init__(self) -> None:
        self._pid = 0
        self._file: IO[bytes] | None = None
        self._key: Hashable = None

    def get(self, key: Hashable, fill: Callable[[IO[bytes]], None]) -> IO[bytes]:
        """The temporary file holding item `key`, written by `fill` the first time it is asked for (an exception from
        `fill` leaves no file behind)."""
        if self._pid != os.getpid():
            self._file, self._key, self._pid = None, None, os.getpid()
        if self._file is not None and self._key == key:
            return self._file
        self.close()
        spill = tempfile.TemporaryFile()
        try:
            fill(spill)
            spill.flush()
        except BaseException:
            spill.close()
            raise
        self._file, self._key = spill, key
        return spill

    def close(self) -> None:
        if self._file is not None and self._pid == os.getpid():
            self._file.close()
        self._file, self._key = None, None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
