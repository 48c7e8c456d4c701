"""Atomic file writes: a file is written under a temporary name in its own folder,
flushed to disk and renamed into place, so that a process killed at any moment
leaves the previous file or the new one complete, never a partial one."""

import contextlib
import os
import pathlib
import tempfile
from collections.abc import Iterator
from typing import IO


# Temporary files start with this prefix (and end with the target's name, so that
# writers that read the format from the suffix, `.fits.gz`, `.npz`, `.png`, see it).
TMP_PREFIX = ".tmp-"


def _mode_for(path: pathlib.Path) -> int:
    """The permissions the new file gets: the replaced file's, else the default
    for a new file (`0o666` less the umask) — a temporary file is `0o600`."""
    try:
        return os.stat(path).st_mode & 0o7777
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _fsync_folder(folder: pathlib.Path) -> None:
    """Make a rename in `folder` durable (where the system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[pathlib.Path]:
    """A temporary path in `path`'s folder for a writer to write the whole file to;
    when the block ends without an error the file is flushed to disk and renamed
    onto `path` (replacing it). On an error the temporary file is removed and
    `path` is untouched.

    The temporary file exists (empty) when the block starts: a writer that refuses
    to replace files needs its `overwrite` option (the caller has already decided
    about `path` itself).

    ```python
    with atomic_path("image.fits") as tmp:
        hdu.writeto(tmp, overwrite=True)
    ```
    """
    path = pathlib.Path(path)
    fd, name = tempfile.mkstemp(
        prefix=TMP_PREFIX, suffix=f"-{path.name}", dir=path.parent
    )
    os.close(fd)
    tmp = pathlib.Path(name)
    try:
        yield tmp
        os.chmod(tmp, _mode_for(path))
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_folder(path.parent)


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "wb") -> Iterator[IO]:
    """A file object (`mode` `"wb"` or `"w"`) on a temporary file that is renamed
    onto `path` when the block ends without an error (see `atomic_path`)."""
    if mode not in ("wb", "w"):
        raise ValueError(f"`mode` must be 'wb' or 'w', got {mode!r}.")
    with atomic_path(path) as tmp, open(tmp, mode) as f:
        yield f
        f.flush()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)
