"""`sample`'s checkpoint folder: the chains' state after warm-up and the draws of
each finished chunk, with the record that tells one run's folder from another's
(the survey checkpoints' lock, fingerprint and atomic writes)."""

import hashlib
import json
import pathlib

import numpy as np

from .._atomic import atomic_open, atomic_write_bytes
from .._solvers._checkpoint import _Lock, _sha256_file, CheckpointError, open_locked


_FORMAT = 1
RECORD = "sample.json"
LOCK = "sample.lock"
WARMUP = "warmup.npz"
_KIND = "eqmodels.sample"


def chunk_name(i: int) -> str:
    return f"draws_{i:05d}.npz"


def _differences(old: dict, new: dict) -> str:
    """What differs between two runs' records, in words."""
    out = []
    if old.get("posterior") != new.get("posterior"):
        out.append("another posterior (its data, priors, model or their code)")
    o, n = old.get("options", {}), new.get("options", {})
    for k in sorted(set(o) | set(n)):
        if o.get(k) != n.get(k):
            out.append(f"{k} {o.get(k)!r} there, {n.get(k)!r} here")
    return "; ".join(out) or "a record of another version"


def _content_hash(arrays: dict, fp: str) -> str:
    h = hashlib.sha256(fp.encode())
    for k in sorted(arrays):
        a = np.ascontiguousarray(np.asarray(arrays[k]))
        h.update(f"{k}{a.shape}{a.dtype}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


class SampleFolder:
    """An open checkpoint folder of one `sample` run: locked by this process,
    its record `sample.json` checked against this run's (`meta`: the posterior's
    fingerprint and the options that decide the draws). `close()` releases it."""

    def __init__(self, path: pathlib.Path, meta: dict):
        self.path = path
        self.meta = {"format": _FORMAT, "kind": _KIND, **meta}
        self.record: dict = {}
        self._lock = _Lock(path / LOCK, what="`sample` run")

    # --- opening -------------------------------------------------------------------

    def open(self) -> "SampleFolder":
        open_locked(self.path, self._lock, self._check, RECORD)
        return self

    def close(self) -> None:
        self._lock.release()

    def refuse(self, what: str) -> CheckpointError:
        return CheckpointError(
            f"`checkpoint` folder {str(self.path)!r}: {what} A `sample` folder is "
            "read back only when every file in it is the one its run wrote; use a "
            "new folder, or delete this one to start again."
        )

    def _data_files(self) -> list[pathlib.Path]:
        return sorted(
            p
            for p in self.path.glob("*.npz")
            if p.name == WARMUP or p.name.startswith("draws_")
        )

    def _read_record(self) -> dict | None:
        path = self.path / RECORD
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise self.refuse(
                f"its record {RECORD} is unreadable or corrupt ({e})."
            ) from None
        if (
            not isinstance(record, dict)
            or record.get("kind") != _KIND
            or not isinstance(record.get("options"), dict)
            or not isinstance(record.get("files"), dict)
            or not all(isinstance(v, str) for v in record["files"].values())
        ):
            raise self.refuse(
                f"its record {RECORD} is corrupt (not a `sample` run's record)."
            )
        if record.get("format") != _FORMAT:
            raise self.refuse(
                f"its record {RECORD} was written by another version of eqmodels "
                f"(format {record.get('format')!r}, this one writes {_FORMAT})."
            )
        return record

    def _write_record(self) -> None:
        atomic_write_bytes(
            self.path / RECORD, json.dumps(self.record, indent=1).encode()
        )

    def _check(self) -> None:
        old = self._read_record()
        files = self._data_files()
        if old is None:
            if files:
                raise self.refuse(
                    f"it holds {files[0].name} but no record {RECORD} saying "
                    "which run wrote it."
                )
        else:
            same = all(old.get(k) == self.meta.get(k) for k in ("posterior", "options"))
            if not same and (files or old["files"]):
                raise CheckpointError(
                    f"`checkpoint` folder {str(self.path)!r} holds another `sample` "
                    f"run ({_differences(old, self.meta)}): resume with the same "
                    "posterior, `init`, `key` and settings, or use a new folder "
                    "(or delete this one to start again)."
                )
            if same:
                self.record = old
                for name in sorted(old["files"]):
                    if not (self.path / name).exists():
                        raise self.refuse(
                            f"{name} is missing ({RECORD} records it finished)."
                        )
        if not self.record:
            # The fingerprint is on disk before any state is.
            self.record = {**self.meta, "files": {}}
            self._write_record()

    # --- files ---------------------------------------------------------------------

    def load(self, name: str, shapes) -> dict | None:
        """The arrays of file `name`, checked against `shapes` (`{key: (shape,
        dtype)}`, or a function of the file's arrays giving it); `None`: not
        written yet."""
        path = self.path / name
        if not path.exists():
            return None
        try:
            # An open file of our own: `np.load` of a path leaks its handle when
            # the file is no zip.
            with open(path, "rb") as fh, np.load(fh, allow_pickle=False) as f:
                content = {k: f[k] for k in f.files}
        except Exception as e:  # noqa: BLE001 - zip, npy and OS errors alike
            raise self.refuse(
                f"{name} is unreadable, truncated or corrupt ({type(e).__name__}: {e})."
            ) from None
        if callable(shapes):
            try:
                shapes = shapes(content)
            except Exception:  # noqa: BLE001 - missing or misshapen entries
                shapes = None
        if shapes is None or set(content) != set(shapes) | {
            "fingerprint",
            "content_sha256",
        }:
            raise self.refuse(
                f"{name} is not a file of this run (it holds {sorted(content)[:8]}, "
                "expected the arrays of a `sample` run's state with its fingerprint and "
                "content hash)."
            )
        if str(content.pop("fingerprint")) != self.meta["posterior"]:
            raise self.refuse(f"{name} holds the state of another posterior's run.")
        digest = str(content.pop("content_sha256"))
        for k, (shape, dtype) in shapes.items():
            x = content[k]
            if x.shape != tuple(shape) or x.dtype != np.dtype(dtype):
                raise self.refuse(
                    f"{name}'s {k} is {x.dtype}{list(x.shape)}, not "
                    f"{np.dtype(dtype)}{list(shape)}."
                )
        if _content_hash(content, self.meta["posterior"]) != digest:
            raise self.refuse(f"{name}'s content does not match its hash (corrupt).")
        file_hash = _sha256_file(path)
        recorded = self.record["files"].get(name)
        if recorded is None:  # written, and killed before it was recorded
            self._record(name, file_hash)
        elif recorded != file_hash:
            raise self.refuse(
                f"{name} is not the file this run wrote (its hash differs from the "
                f"one {RECORD} records)."
            )
        return content

    def save(self, name: str, arrays: dict) -> None:
        """Write `arrays` to file `name` (atomically: a killed process leaves none,
        or a whole one), then record it."""
        arrays = {k: np.asarray(v) for k, v in arrays.items()}
        fp = self.meta["posterior"]
        path = self.path / name
        with atomic_open(path, "wb") as f:
            np.savez(
                f,
                fingerprint=np.asarray(fp),
                content_sha256=np.asarray(_content_hash(arrays, fp)),
                **arrays,
            )
        self._record(name, _sha256_file(path))

    def _record(self, name: str, digest: str) -> None:
        self.record = {**self.record, "files": {**self.record["files"], name: digest}}
        self._write_record()


def open_sample_folder(checkpoint, meta: dict) -> SampleFolder:
    """The checkpoint folder (created), locked, its record checked or written."""
    folder = pathlib.Path(checkpoint)
    if folder.exists() and not folder.is_dir():
        raise ValueError(
            f"`checkpoint` {str(folder)!r} is a file: pass a folder (it is created "
            "if missing)."
        )
    folder.mkdir(parents=True, exist_ok=True)
    return SampleFolder(folder, meta).open()
