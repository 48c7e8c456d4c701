"""Atomic writes (issue 41, item 2): `save_fits` and the command line's outputs go
to a temporary file in the same folder and are renamed into place, so that a
process killed at any point leaves the previous file intact or the new one
complete; `overwrite` takes a bool only; the command line refuses an existing
output without `--overwrite` and an `-o` that is not a FITS name."""

import os
import pathlib
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

import eqmodels as em
from eqmodels._atomic import atomic_open, atomic_path

from .unchecked import unchecked_error


ROOT = pathlib.Path(__file__).resolve().parents[1]
GRID = em.ImageGrid.from_fov(8, 100.0)

# A child process that writes image B over `path` with `save_fits`, killing itself
# with SIGKILL at the point named: "data" (the header written, the pixels not),
# "rename" (the new file complete, not yet renamed into place), "after" (renamed).
_CHILD = """
import os, signal, sys
import numpy as np
import eqmodels as em
from astropy.io.fits.hdu.base import _BaseHDU
import eqmodels._atomic as atomic

path, point = sys.argv[1:3]
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if point == "data":
    _BaseHDU._writedata = die
elif point == "rename":
    atomic.os.replace = die
elif point == "after":
    atomic._fsync_folder = die
grid = em.ImageGrid.from_fov(8, 100.0)
em.save_fits(np.full(grid.shape, 2.0), grid, path, overwrite=True)
"""


def _write_killed(path, point):
    env = {
        **os.environ,
        "JAX_PLATFORMS": "cpu",
        "PYTHONPATH": os.pathsep.join(
            [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
        ),
    }
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(path), point],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.slow
@pytest.mark.parametrize("point", ["data", "rename", "after"])
def test_save_fits_killed_while_writing_leaves_a_whole_file(tmp_path, point):
    path = tmp_path / "image.fits"
    em.save_fits(np.full(GRID.shape, 1.0), GRID, path)
    proc = _write_killed(path, point)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    image, grid = em.load_fits(path)  # whole, never partial
    assert grid.shape == GRID.shape
    expected = 2.0 if point == "after" else 1.0
    np.testing.assert_array_equal(image, np.full(GRID.shape, expected))
    # What a kill leaves besides is a hidden temporary file, never the target.
    others = {p.name for p in tmp_path.iterdir()} - {"image.fits"}
    assert all(n.startswith(".tmp-") for n in others), others


_OVERWRITE_NO = unchecked_error(
    "em.save_fits(np.ones(g.shape), g, p, overwrite='no'); "
    "raise RuntimeError(str(em.load_fits(p)[0].max()))",
    "(TypeError, RuntimeError)",
    setup=(
        "import tempfile, os; g = em.ImageGrid.from_fov(8, 100.0); "
        "p = os.path.join(tempfile.mkdtemp(), 'a.fits'); "
        "em.save_fits(np.zeros(g.shape), g, p)"
    ),
)


def test_save_fits_overwrite_takes_a_bool(unchecked):
    """Without the runtime type checker too: `"no"` replaced the file before."""
    assert "`overwrite` must be True or False, got 'no'" in unchecked[_OVERWRITE_NO]


def test_save_fits_overwrite_and_a_folder(tmp_path):
    path = tmp_path / "a.fits"
    em.save_fits(np.ones(GRID.shape), GRID, path)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        em.save_fits(np.ones(GRID.shape), GRID, path, overwrite=False)
    em.save_fits(np.full(GRID.shape, 3.0), GRID, path, overwrite=True)
    np.testing.assert_array_equal(em.load_fits(path)[0], 3.0)
    with pytest.raises(IsADirectoryError, match="is a folder: give the FITS file"):
        em.save_fits(np.ones(GRID.shape), GRID, tmp_path, overwrite=True)
    # A compressed name stays compressed (the temporary file keeps the suffix).
    gz = tmp_path / "b.fits.gz"
    em.save_fits(np.ones(GRID.shape), GRID, gz)
    assert gz.read_bytes()[:2] == b"\x1f\x8b"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.fits", "b.fits.gz"]


def test_atomic_helpers(tmp_path):
    path = tmp_path / "x.bin"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    with pytest.raises(RuntimeError):
        with atomic_open(path) as f:
            f.write(b"new, half")
            raise RuntimeError
    assert path.read_bytes() == b"old"  # an error leaves the old file
    assert [p.name for p in tmp_path.iterdir()] == ["x.bin"]  # and no temp file
    with atomic_path(path) as tmp:
        assert tmp.parent == tmp_path and tmp.name.endswith("-x.bin")
        tmp.write_bytes(b"new")
    assert path.read_bytes() == b"new"
    assert path.stat().st_mode & 0o777 == 0o640  # the replaced file's mode kept
    with pytest.raises(ValueError, match="`mode`"):
        with atomic_open(path, "a"):
            pass


@pytest.mark.parametrize(
    "args, message",
    [
        (["{data}", "-o", "{tmp}/a.png"], r"-o/--output .*a\.png' is not a FITS"),
        (["{data}", "-o", "{tmp}/a"], "is not a FITS file name"),
        (["{data}", "-o", "{tmp}/old.fits"], r"old\.fits' exists: pass --overwrite"),
        (
            ["{data}", "-o", "{tmp}/a.fits", "--png", "{tmp}/old.png"],
            r"--png .*old\.png' exists: pass --overwrite",
        ),
        # With --overwrite the outputs pass; the next check (--npix) speaks.
        (
            ["{data}", "-o", "{tmp}/old.fits", "--png", "{tmp}/old.png"]
            + ["--overwrite", "--npix", "0"],
            "--npix must be >= 1",
        ),
        (["{data}", "-o", "{tmp}/a.FITS.gz", "--npix", "0"], "--npix must be >= 1"),
    ],
)
def test_cli_refuses_existing_and_non_fits_outputs(tmp_path, capsys, args, message):
    from eqmodels._cli import main

    (tmp_path / "old.fits").write_bytes(b"precious")
    (tmp_path / "old.png").write_bytes(b"precious")
    argv = ["image"] + [a.format(tmp=tmp_path, data=em.example_uvfits()) for a in args]
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert (tmp_path / "old.fits").read_bytes() == b"precious"
    assert not list(tmp_path.glob(".tmp-*"))  # the write probe leaves nothing


def test_cli_probes_that_it_can_create_its_outputs(tmp_path, capsys, monkeypatch):
    """A folder where no file can be created (whatever `os.access` says) is
    refused before the imaging."""
    import tempfile

    from eqmodels._cli import main

    def refuse(*args, **kwargs):
        raise PermissionError("no")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(SystemExit):
        main(["image", str(em.example_uvfits()), "-o", str(tmp_path / "a.fits")])
    assert re.search("-o/--output .* is not writable", capsys.readouterr().err)


_CHILD_UV = """
import os, signal, sys
import eqmodels as em
from astropy.io.fits.hdu.base import _BaseHDU
import eqmodels._atomic as atomic

src, path, point = sys.argv[1:4]
die = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
if point == "data":
    _BaseHDU._writedata = die
elif point == "rename":
    atomic.os.replace = die
elif point == "after":
    atomic._fsync_folder = die
data = em.load_uvfits(src)
em.save_uvfits(data.replace(vis=2 * data.vis), path, overwrite=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("point", ["data", "rename", "after"])
def test_save_uvfits_killed_while_writing_leaves_a_whole_file(tmp_path, point):
    src = ROOT / "eqmodels" / "data" / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"
    data = em.load_uvfits(src)
    path = tmp_path / "data.uvfits"
    em.save_uvfits(data, path)
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD_UV, str(src), str(path), point],
        capture_output=True, text=True, timeout=120, env=env,
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    back = em.load_uvfits(path)  # whole, never partial
    factor = 2.0 if point == "after" else 1.0
    np.testing.assert_allclose(
        np.asarray(back.vis), factor * np.asarray(data.vis), rtol=1e-6
    )
    others = {p.name for p in tmp_path.iterdir()} - {"data.uvfits"}
    assert all(n.startswith(".tmp-") for n in others), others
