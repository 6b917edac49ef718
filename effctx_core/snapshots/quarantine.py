"""quarantine/: files that failed a check, set aside for a look and purged after a week.

A moved file is named <its name>.<when>.<kind of damage>[.N]; the move keeps its mtime,
so a purge counts a file's age from when it was last written.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable

from effctx_core.atomic import fsync_dir
from effctx_core.snapshots.blobfile import BlobDamage
from effctx_core.snapshots.records import Quarantined


class Quarantine:
    def __init__(self, directory: Path, clock: Callable[[], float]):
        self.dir = directory
        self._clock = clock
        self.log: list[Quarantined] = []  # every file found bad by this object, moved or not

    def move(self, path: Path, damage: BlobDamage) -> Path:
        """Under the store lock: move `path` aside; raises OSError when it cannot."""
        self.dir.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(self._clock()))
        dest = self.dir / f"{path.name}.{stamp}.{damage.slug}"
        n = 1
        while dest.exists():
            n += 1
            dest = self.dir / f"{path.name}.{stamp}.{damage.slug}.{n}"
        os.replace(path, dest)
        fsync_dir(path.parent)
        fsync_dir(self.dir)
        self.log.append(Quarantined(path.name, damage.reason, str(dest)))
        return dest

    def note(self, path: Path, damage: BlobDamage) -> None:
        """A bad file that could not be moved (a read-only store): reported all the same."""
        self.log.append(Quarantined(path.name, damage.reason, ""))

    def since(self, mark: int) -> tuple[Quarantined, ...]:
        return tuple(self.log[mark:])

    def purge(self, older_than: float) -> tuple[str, ...]:
        """Delete the files last written before `older_than` (seconds since the epoch)."""
        if not self.dir.is_dir():
            return ()
        purged = []
        for path in sorted(self.dir.iterdir()):
            if path.stat().st_mtime < older_than:
                path.unlink(missing_ok=True)
                purged.append(path.name)
        return tuple(purged)

    def names(self) -> list[str]:
        """The files set aside so far (none when the folder cannot be read)."""
        try:
            return [p.name for p in self.dir.iterdir()]
        except OSError:
            return []
