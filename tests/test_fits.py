"""eqmodels' own FITS reader (`eqmodels/_data/_fits.py`) against astropy's."""

import numpy as np
import pytest

from eqmodels._data import _fits as F

from .conftest import TEST_DATA


fits = pytest.importorskip("astropy.io.fits")

LOCAL = TEST_DATA / "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits"


def _uvfits_files(shared_data):
    files = sorted((shared_data / "eht").glob("*/*.uvfits"))
    return files + [LOCAL]


def _same_array(ours, theirs):
    """Equal bit for bit, same shape, same type up to byte order."""
    theirs = np.asarray(theirs)
    assert ours.shape == theirs.shape
    assert ours.dtype == theirs.dtype.newbyteorder("=")
    assert np.array_equal(ours, theirs)


def _same_header(ours, theirs):
    keys = [k for k in theirs if k not in ("", "HISTORY", "COMMENT")]
    assert keys
    for k in keys:
        assert ours[k] == theirs[k], k
        assert type(ours[k]) is type(theirs[k]), k


def test_every_public_uvfits_file_reads_as_astropy_reads_it(shared_data):
    """Headers, the random-groups parameters (scaled) and data, and every column of
    every binary table, bit for bit, on each public EHT file."""
    files = _uvfits_files(shared_data)
    assert len(files) > 1
    for path in files:
        hdus = F.read_fits(path)
        with fits.open(path, memmap=False) as hdul:
            assert [h.name for h in hdus] == [h.name for h in hdul]
            for ours, theirs in zip(hdus, hdul):
                _same_header(ours.header, theirs.header)
            groups = F.random_groups(hdus[0])
            g = hdul[0].data
            assert groups.parnames == list(g.parnames)
            for i in range(len(g.parnames)):
                _same_array(groups.params[i], g.par(i))
            _same_array(groups.data, g.data)
            for ours, theirs in zip(hdus[1:], hdul[1:]):
                table = F.BinTable(ours)
                assert table.names == theirs.columns.names
                for name in theirs.columns.names:
                    col = theirs.data[name]
                    if col.dtype.kind in "SU":
                        assert table.column(name).tolist() == [str(s) for s in col]
                    else:
                        _same_array(table.column(name), col)


def _scaled_file(path):
    """Integer groups and table columns with non-trivial scalings, written by
    astropy."""
    rng = np.random.default_rng(0)
    n = 7
    data = rng.integers(-3000, 3000, size=(n, 1, 2, 3)).astype(np.int16)
    g = fits.GroupData(
        data,
        bitpix=16,
        parnames=["UU", "DATE", "DATE"],
        pardata=[
            rng.integers(-30000, 30000, n).astype(np.int16),
            np.full(n, 7, np.int16),
            rng.integers(0, 100, n).astype(np.int16),
        ],
    )
    hdu = fits.GroupsHDU(g)
    hdu.header["PSCAL1"] = 1.5e-9
    hdu.header["PZERO1"] = 0.0
    hdu.header["PSCAL2"] = 1.0
    hdu.header["PZERO2"] = 2457850.5
    hdu.header["PSCAL3"] = 0.01
    hdu.header["PZERO3"] = 0.0
    hdu.header["OBJECT"] = "it''s"
    table = fits.BinTableHDU.from_columns(
        [
            fits.Column("NAME", "5A", array=["a", "bb ", "ccccc"]),
            fits.Column("FLAG", "2L", array=[[True, False], [False, True], [1, 1]]),
            fits.Column("BITS", "11X", array=np.eye(3, 11, dtype=bool)),
            fits.Column("SHORT", "1I", array=np.array([1, -2, 3], np.int16)),
            fits.Column("LONG", "2K", array=[[1, 2], [3, 4], [5, 6]]),
            fits.Column("BYTE", "1B", array=[0, 127, 255]),
            fits.Column("CPLX", "1M", array=[1 + 2j, -1j, 3]),
            fits.Column("XYZ", "3D", array=rng.normal(size=(3, 3))),
        ],
        name="my table",
    )
    fits.HDUList([hdu, table]).writeto(path)
    # The scalings of the groups' data and of a table column, added to the written
    # headers (astropy 8 writes neither a scaled integer column nor scaled integer
    # groups correctly itself).
    _add_cards(
        path, 0, ["BSCALE  =                 0.25", "BZERO   =                  3.0"]
    )
    _add_cards(
        path, 1, ["TSCAL4  =                  0.5", "TZERO4  =                 10.0"]
    )
    return data


def _add_cards(path, hdu, cards):
    """Write `cards` in place of HDU `hdu`'s END card and the blanks after it."""
    raw = path.read_bytes()
    start = 0 if hdu == 0 else raw.index(b"XTENSION")
    end = raw.index(b"END" + b" " * 77, start)
    new = b"".join(c.ljust(80).encode() for c in cards) + b"END".ljust(80)
    assert raw[end + 80 : end + len(new)].strip() == b""
    path.write_bytes(raw[:end] + new + raw[end + len(new) :])


def test_scaled_groups_and_table_columns_match_astropy(tmp_path):
    """`PSCALn`/`PZEROn`, `BSCALE`/`BZERO`, `TSCALn`/`TZEROn` applied in float64;
    string, logical, bit, byte, int64 and complex columns."""
    path = tmp_path / "scaled.fits"
    stored = _scaled_file(path)
    hdus = F.read_fits(path)
    groups = F.random_groups(hdus[0])
    table = F.BinTable(F.find(hdus, "My Table"))
    with fits.open(path, memmap=False) as hdul:
        g = hdul[0].data
        for i in range(3):
            _same_array(groups.params[i], g.par(i))
        assert np.array_equal(groups.data, stored.astype(np.float64) * 0.25 + 3.0)
        assert groups.data.dtype == np.float64
        t = hdul[1].data
        assert table.column("NAME").tolist() == ["a", "bb", "ccccc"]
        _same_array(table.column("FLAG"), t["FLAG"])
        _same_array(table.column("SHORT"), t["SHORT"])
        _same_array(table.column("LONG"), t["LONG"])
        _same_array(table.column("BYTE"), t["BYTE"])
        _same_array(table.column("CPLX"), t["CPLX"])
        _same_array(table.column("XYZ"), t["XYZ"])
        _same_array(table.column("BITS"), t["BITS"])  # bits as booleans
    assert hdus[0].header["OBJECT"] == "it''s"


def test_header_values():
    """Strings (quotes doubled, trailing blanks dropped, a slash inside), logicals,
    integers, floats with D exponents, complex, comments and empty values."""
    assert F.parse_value("'O''Brien '           / a comment") == "O'Brien"
    assert F.parse_value("'a/b'") == "a/b"
    assert F.parse_value("'  lead'") == "  lead"
    assert F.parse_value("                   T / yes") is True
    assert F.parse_value("F") is False
    assert F.parse_value("  -42 / n") == -42
    assert type(F.parse_value("7")) is int
    assert F.parse_value("1.5D-3") == 1.5e-3
    assert F.parse_value("  2.0E10 /x") == 2.0e10
    assert F.parse_value("(1.0, -2.5)") == complex(1.0, -2.5)
    assert F.parse_value("        / only a comment") is None
    with pytest.raises(F.FITSFormatError, match="unterminated"):
        F.parse_value("'no end")
    # Only FITS's number syntax (Python's `float` takes `1_0.0`, `nan`, `inf`),
    # and only finite values.
    for bad in ("1.2.3", "1_0.0", "nan", "inf", "-Infinity", "0x10", "1e"):
        with pytest.raises(F.FITSFormatError, match="unreadable"):
            F.parse_value(bad)
    with pytest.raises(F.FITSFormatError, match="beyond float64"):
        F.parse_value("1E+400")
    assert F.parse_value(".5") == 0.5 and F.parse_value("+3.") == 3.0


def _block(*cards):
    text = "".join(c.ljust(80) for c in cards + ("END",))
    return text.ljust(-(-len(text) // 2880) * 2880).encode("ascii")


def test_header_blocks_and_hdu_boundaries(tmp_path):
    """A header spanning two blocks; first occurrence of a keyword wins;
    commentary cards ignored; bytes after the last HDU that are not an extension
    are ignored."""
    cards = ["SIMPLE  =                    T", "BITPIX  =                  -64"]
    cards += ["NAXIS   =                    1", "NAXIS1  =                    3"]
    cards += [f"HISTORY filler {i}" for i in range(40)]
    cards += ["OBJECT  = 'first'", "OBJECT  = 'second'"]
    data = np.array([1.0, -2.0, 3.5], ">f8").tobytes().ljust(2880, b"\0")
    path = tmp_path / "two_blocks.fits"
    path.write_bytes(_block(*cards) + data + b"trailing junk")
    (hdu,) = F.read_fits(path)
    assert hdu.header["OBJECT"] == "first"
    assert "HISTORY" not in hdu.header
    assert np.array_equal(np.frombuffer(hdu.data, ">f8"), [1.0, -2.0, 3.5])


@pytest.mark.parametrize(
    "content, match",
    [
        (b"not a FITS file" * 300, "SIMPLE"),
        (_block("SIMPLE  =                    T")[:2000], "ends inside a header"),
        (
            _block("SIMPLE  =                    T", "BITPIX  =                   -32")[
                :2880
            ].replace(b"END ", b"XXX "),
            "ends inside a header",
        ),
        (
            _block(
                "SIMPLE  =                    T",
                "BITPIX  =                  -32",
                "NAXIS   =                    1",
                "NAXIS1  =                 1000",
            )
            + b"\0" * 100,
            "ends inside the data of HDU 0",
        ),
        (
            _block(
                "SIMPLE  =                    T",
                "BITPIX  =                   12",
                "NAXIS   =                    1",
                "NAXIS1  =                    1",
            ),
            "BITPIX = 12",
        ),
        (
            _block(
                "SIMPLE  =                    T",
                "BITPIX  =                    8",
                "NAXIS   =                    2",
                "NAXIS1  =                    1",
            ),
            "does not give its data size",
        ),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path, content, match):
    path = tmp_path / "bad.fits"
    path.write_bytes(content)
    with pytest.raises(F.FITSFormatError, match=match):
        F.read_fits(path)


def test_truncation_is_its_own_error(tmp_path):
    path = tmp_path / "cut.fits"
    path.write_bytes(LOCAL.read_bytes()[:5000])
    with pytest.raises(F.FITSTruncatedError):
        F.read_fits(path)


def test_bad_table_columns_are_refused(tmp_path):
    path = tmp_path / "vla.fits"
    fits.HDUList(
        [
            fits.PrimaryHDU(),
            fits.BinTableHDU.from_columns(
                [fits.Column("V", "PJ()", array=[np.arange(2), np.arange(3)])],
                name="T",
            ),
        ]
    ).writeto(path)
    hdus = F.read_fits(path)
    table = F.BinTable(F.find(hdus, "t"))
    with pytest.raises(F.FITSFormatError, match="variable-length"):
        table.column("V")
    with pytest.raises(KeyError, match="no column 'W'"):
        table.column("W")
    with pytest.raises(F.FITSFormatError, match="not a binary table"):
        F.BinTable(hdus[0])
    assert F.find(hdus, "nothing") is None


def test_commentary_malformed_and_continued_cards(tmp_path):
    """From a review: commentary cards whose text starts with `= ` are free text;
    a malformed card refuses a file only when it is used (naming it); a value with
    no blank after `=` is not silently absent; CONTINUE cards extend a string."""
    cards = [
        "SIMPLE  =                    T",
        "BITPIX  =                    8",
        "NAXIS   =                    0",
        "COMMENT = calibrated with 'HOPS",
        "HISTORY = 1_0.0",
        "        = 'blank keyword'",
        "DATE-OBS= 2017-04-10",
        "PSCAL1  =4.4E-12",
        "OBJECT  = 'M87 core observed by the&'",
        "CONTINUE  ' Event Horizon &'",
        "CONTINUE  'Telescope'",
        "ORIGIN  = 'x&'",
    ]
    path = tmp_path / "cards.fits"
    path.write_bytes(_block(*cards))
    (hdu,) = F.read_fits(path)
    h = hdu.header
    assert "COMMENT" not in h and "HISTORY" not in h and "" not in h
    assert h["OBJECT"] == "M87 core observed by the Event Horizon Telescope"
    assert h["ORIGIN"] == "x&"  # no CONTINUE after it
    with pytest.raises(F.FITSFormatError, match="card DATE-OBS: unreadable"):
        h.get("DATE-OBS")
    with pytest.raises(F.FITSFormatError, match="PSCAL1 has no blank after"):
        h.number("PSCAL1")


@pytest.mark.parametrize(
    "form, zero, values",
    [
        ("1I", 32768, np.array([0, 1, 65535], np.uint16)),
        ("1J", 2**31, np.array([0, 7, 2**32 - 1], np.uint32)),
        ("1K", 2**63, np.array([0, 2**63 + 1, 2**64 - 1], np.uint64)),
    ],
)
def test_offset_integers_are_exact(tmp_path, form, zero, values):
    """Integers offset by half their range (FITS's unsigned convention) come back
    exactly, as astropy gives them, not rounded in float64."""
    path = tmp_path / "unsigned.fits"
    col = fits.Column("X", form, array=values, bzero=zero)
    fits.HDUList([fits.PrimaryHDU(), fits.BinTableHDU.from_columns([col])]).writeto(
        path
    )
    ours = F.BinTable(F.read_fits(path)[1]).column("X")
    with fits.open(path) as hdul:
        _same_array(ours, hdul[1].data["X"])
    assert np.array_equal(ours, values)
