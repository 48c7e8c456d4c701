"""A small FITS reader in numpy: headers, random groups and binary tables.

Enough of the FITS standard (4.0) to read uvfits visibility files without astropy:
the headers of every HDU, the primary HDU's random-groups array and its scaled
parameters, and the columns of binary-table extensions (the `AIPS AN` and `AIPS FQ`
tables). Values are scaled as the standard says (`PSCALn`/`PZEROn` for group
parameters, `BSCALE`/`BZERO` for the groups' data, `TSCALn`/`TZEROn` for table
columns), in float64; unscaled values keep the file's type. `tests/test_fits.py`
checks every array against astropy's, bit for bit, on the public EHT files (astropy
8 ignores a `BZERO` on random groups; this reader applies it, as the standard says).

What it does not read (uvfits files do not use it): variable-length table columns
(`P`/`Q` formats), ASCII tables, compressed images. Images are written and read
through astropy (`_fitsimage.py`).
"""

import gzip
import math
import os
import re
import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np


BLOCK = 2880
CARD = 80

_BITPIX = {8: ">u1", 16: ">i2", 32: ">i4", 64: ">i8", -32: ">f4", -64: ">f8"}
# Binary-table formats: bytes per element and numpy type ("L", "A", "X" by hand).
_TFORM = {
    "L": (1, "S1"),
    "B": (1, ">u1"),
    "I": (2, ">i2"),
    "J": (4, ">i4"),
    "K": (8, ">i8"),
    "A": (1, None),
    "E": (4, ">f4"),
    "D": (8, ">f8"),
    "C": (8, ">c8"),
    "M": (16, ">c16"),
    "P": (8, None),
    "Q": (16, None),
}
_TFORM_RE = re.compile(r"^\s*(\d*)\s*([LXBIJKAEDCMPQ])(.*)$")
_INT_RE = re.compile(r"^[+-]?\d+$")


class FITSFormatError(ValueError):
    """Bytes that are not a FITS file this reader understands."""


class FITSTruncatedError(FITSFormatError):
    """A FITS file that ends inside a header or a data unit."""


class Header:
    """The keyword → value cards of one HDU (first occurrence wins; keywords
    upper-cased; commentary cards such as `HISTORY` are not kept).

    A value is parsed when it is first asked for, so a malformed card that is
    never used (a `DATE-OBS` without quotes) does not make a file unreadable; one
    that is used raises a `FITSFormatError` naming it.
    """

    def __init__(self, cards: dict[str, str], continued: dict[str, list[str]]):
        self._raw = cards  # key -> the value field (columns 11-80), or _MALFORMED
        self._continued = continued  # key -> CONTINUE cards' value fields
        self._parsed: dict[str, Any] = {}

    def _value(self, key: str) -> Any:
        key = key.upper()
        if key not in self._parsed:
            raw = self._raw[key]
            if raw is _MALFORMED:
                raise FITSFormatError(
                    f"card {key} has no blank after its '=': not a valid value card"
                )
            try:
                value = parse_value(raw)
                if isinstance(value, str):
                    for more in self._continued.get(key, ()):
                        if not value.endswith("&"):
                            break
                        value = value[:-1] + parse_value(more)
            except FITSFormatError as e:
                raise FITSFormatError(f"card {key}: {e}") from None
            self._parsed[key] = value
        return self._parsed[key]

    def get(self, key: str, default: Any = None) -> Any:
        if key.upper() not in self._raw:
            return default
        value = self._value(key)
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        if key.upper() not in self._raw:
            raise KeyError(f"no {key!r} card in the header")
        return self._value(key)

    def __contains__(self, key: str) -> bool:
        return key.upper() in self._raw

    def number(self, key: str, default: Any = None) -> Any:
        """Card `key` as a float (`default` when absent or without a value), or a
        `FITSFormatError` when it holds something else (a string, a logical)."""
        value = self.get(key)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise FITSFormatError(f"card {key.upper()} = {value!r} is not a number")
        return float(value)

    def integer(self, key: str, default: Any = None) -> Any:
        """Card `key` as an int (`default` when absent), or a `FITSFormatError`."""
        value = self.get(key)
        if value is None:
            if default is None:
                raise FITSFormatError(f"no {key.upper()} card")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            raise FITSFormatError(f"card {key.upper()} = {value!r} is not an integer")
        return value

    def keys(self):
        return self._raw.keys()


_MALFORMED = object()
# Keywords whose cards hold free text even when columns 9-10 read "= " (FITS 4.0,
# section 4.4.2.4): never parsed as values.
_COMMENTARY = frozenset({"", "COMMENT", "HISTORY", "CONTINUE"})
# FITS 4.0's number syntax (section 4.2.3/4.2.4): `float()` alone would also take
# `1_0.0`, `nan` or `inf`.
_FLOAT_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([EDed][+-]?\d+)?$")


def parse_value(text: str) -> Any:
    """The value of a card from its value field (columns 11–80): a string (quotes
    undone, trailing blanks dropped), `True`/`False`, an int, a finite float (`D`
    exponents too), a complex `(re, im)`, or `None` (no value)."""
    s = text.lstrip()
    if s.startswith("'"):
        out, i = [], 1
        while i < len(s):
            if s[i] == "'":
                if i + 1 < len(s) and s[i + 1] == "'":
                    out.append("'")
                    i += 2
                    continue
                return "".join(out).rstrip()
            out.append(s[i])
            i += 1
        raise FITSFormatError(f"unterminated string value {text.strip()!r}")
    s = s.split("/", 1)[0].strip()
    if s == "":
        return None
    if s == "T":
        return True
    if s == "F":
        return False
    if _INT_RE.match(s):
        return int(s)
    if s.startswith("(") and s.endswith(")"):
        parts = s[1:-1].split(",")
        if len(parts) == 2:
            return complex(_float(parts[0]), _float(parts[1]))
    return _float(s)


def _float(s: str) -> float:
    s = s.strip()
    if not _FLOAT_RE.match(s):
        raise FITSFormatError(f"unreadable card value {s!r}")
    value = float(s.replace("D", "E").replace("d", "e"))
    if not math.isfinite(value):
        raise FITSFormatError(f"card value {s!r} is beyond float64's range")
    return value


def parse_header(raw: bytes, start: int) -> tuple[Header, int]:
    """The header that begins at byte `start` of `raw`, and the offset of the block
    after its `END` card."""
    cards: dict[str, Any] = {}
    continued: dict[str, list[str]] = {}
    last = None  # the last value card, which CONTINUE cards extend
    pos = start
    while True:
        block = raw[pos : pos + BLOCK]
        if len(block) < BLOCK:
            raise FITSTruncatedError(
                f"the file ends inside a header (at byte {len(raw)}, no END card)"
            )
        pos += BLOCK
        text = block.decode("ascii", errors="replace")
        for i in range(0, BLOCK, CARD):
            card = text[i : i + CARD]
            key = card[:8].rstrip().upper()
            if key == "END":
                return Header(cards, continued), pos
            if key == "CONTINUE":
                if last is not None:
                    continued.setdefault(last, []).append(card[8:])
                continue
            last = None
            if key in _COMMENTARY or key in cards:
                continue
            if card[8:10] == "= ":
                cards[key] = card[10:]
                last = key
            elif card[8:9] == "=":
                cards[key] = _MALFORMED


def _data_bytes(h: Header) -> int:
    """Bytes of the data unit (without padding): `|BITPIX|/8 · GCOUNT ·
    (PCOUNT + Π NAXISn)`, with NAXIS1 = 0 of random groups left out."""
    naxis = h.integer("NAXIS")
    if not 0 <= naxis <= 999:
        raise FITSFormatError(f"NAXIS = {naxis} is not between 0 and 999")
    bitpix = h.integer("BITPIX")
    if bitpix not in _BITPIX:
        raise FITSFormatError(f"BITPIX = {bitpix} is not a FITS data type")
    if naxis == 0:
        return 0
    dims = [h.integer(f"NAXIS{k}") for k in range(1, naxis + 1)]
    if h.get("GROUPS") is True and dims[0] == 0:
        dims = dims[1:]
    gcount, pcount = h.integer("GCOUNT", 1), h.integer("PCOUNT", 0)
    if min(dims + [gcount, pcount]) < 0:
        raise FITSFormatError("a negative NAXISn, GCOUNT or PCOUNT")
    return abs(bitpix) // 8 * gcount * (pcount + math.prod(dims))


@dataclass(frozen=True)
class HDU:
    """One header-data unit: its header and the bytes of its data unit."""

    header: Header
    data: memoryview

    @property
    def name(self) -> str:
        """`EXTNAME`, upper-cased and stripped (`"PRIMARY"` for the first HDU)."""
        return str(self.header.get("EXTNAME", "PRIMARY")).strip().upper()

    @property
    def is_groups(self) -> bool:
        """A random-groups array (`GROUPS = T`, `NAXIS1 = 0`)."""
        h = self.header
        return (
            h.get("GROUPS") is True
            and int(h.get("NAXIS", 0)) >= 1
            and int(h.get("NAXIS1", -1)) == 0
        )


def read_fits(path: str | os.PathLike) -> list[HDU]:
    """Every HDU of the FITS file at `path` (bytes after the last complete HDU that
    do not begin a new extension are ignored, as readers commonly do)."""
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:2] == b"\x1f\x8b":  # gzip-compressed (`.fits.gz`), as astropy reads
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise FITSFormatError(
                f"it is gzip-compressed but does not decompress ({e})"
            ) from None
    if not raw.startswith(b"SIMPLE  ="):
        raise FITSFormatError("not a FITS file: it does not begin with a SIMPLE card")
    hdus, pos = [], 0
    while True:
        header, start = parse_header(raw, pos)
        try:
            size = _data_bytes(header)
        except FITSFormatError as e:
            raise FITSFormatError(
                f"the header of HDU {len(hdus)} does not give its data size ({e})"
            ) from None
        if start + size > len(raw):
            raise FITSTruncatedError(
                f"the file ends inside the data of HDU {len(hdus)} "
                f"({header.get('EXTNAME', 'PRIMARY')!s}): {start + size - len(raw)} "
                "bytes missing"
            )
        hdus.append(HDU(header, memoryview(raw)[start : start + size]))
        pos = start + -(-size // BLOCK) * BLOCK
        if raw[pos : pos + 9] != b"XTENSION=":
            return hdus


def find(hdus: list[HDU], name: str) -> HDU | None:
    """The first HDU named `name` (`EXTNAME`, case and trailing blanks ignored)."""
    name = name.strip().upper()
    for hdu in hdus:
        if hdu.name == name:
            return hdu
    return None


def native(x: np.ndarray) -> np.ndarray:
    """A copy of `x` in the machine's byte order (FITS stores big-endian)."""
    return x.astype(x.dtype.newbyteorder("="))


# The FITS convention for unsigned integers: an offset of half the type's range,
# applied exactly (section 5.2.5) rather than in float64 (as astropy does).
_UNSIGNED = {
    np.dtype("int16"): (2**15, np.uint16),
    np.dtype("int32"): (2**31, np.uint32),
    np.dtype("int64"): (2**63, np.uint64),
}


def _scaled(x: np.ndarray, scale, zero) -> np.ndarray:
    """`x · scale + zero` in float64, or `x` (in native byte order) when the scaling
    is the identity; integers offset by half their range are returned exactly, as
    the unsigned type they encode."""
    scale = 1.0 if scale is None else scale
    zero = 0.0 if zero is None else zero
    x = native(x)
    if scale == 1 and zero == 0:
        return x
    offset, target = _UNSIGNED.get(x.dtype, (None, None))
    if scale == 1 and zero == offset:
        n = x.dtype.itemsize
        sign_bit = np.array(1 << (8 * n - 1), f"u{n}").view(target)
        return x.view(target) ^ sign_bit
    return x.astype(np.float64) * scale + zero


@dataclass(frozen=True)
class RandomGroups:
    """The random-groups array of a primary HDU: `parnames` (`PTYPEn`), `params`
    (one array per parameter, scaled) and `data` (`(GCOUNT, NAXISn, …, NAXIS2)`,
    scaled)."""

    parnames: list[str]
    params: list[np.ndarray]
    data: np.ndarray


def random_groups(hdu: HDU) -> RandomGroups:
    h = hdu.header
    naxis = h.integer("NAXIS")
    shape = tuple(h.integer(f"NAXIS{k}") for k in range(naxis, 1, -1))
    pcount, gcount = h.integer("PCOUNT", 0), h.integer("GCOUNT", 1)
    row = pcount + math.prod(shape)
    flat = np.frombuffer(hdu.data, _BITPIX[h.integer("BITPIX")], count=gcount * row)
    flat = flat.reshape(gcount, row)
    parnames = [str(h.get(f"PTYPE{i}", "")).strip() for i in range(1, pcount + 1)]
    params = [
        _scaled(flat[:, i - 1], h.number(f"PSCAL{i}"), h.number(f"PZERO{i}"))
        for i in range(1, pcount + 1)
    ]
    data = _scaled(flat[:, pcount:], h.number("BSCALE"), h.number("BZERO"))
    return RandomGroups(parnames, params, data.reshape((gcount,) + shape))


class BinTable:
    """The columns of a `BINTABLE` extension, read on demand by name."""

    def __init__(self, hdu: HDU):
        h = hdu.header
        if str(h.get("XTENSION", "")).strip().upper() != "BINTABLE":
            raise FITSFormatError(f"HDU {hdu.name!r} is not a binary table")
        self._hdu = hdu
        self._rows = h.integer("NAXIS2", 0)
        self._width = h.integer("NAXIS1", 0)
        if self._rows * self._width > len(hdu.data):
            raise FITSFormatError(
                f"table {hdu.name!r} has {self._rows} rows of {self._width} bytes "
                f"but a data unit of {len(hdu.data)} bytes"
            )
        self._cols: dict[str, tuple[int, int, str, int]] = {}
        offset = 0
        for i in range(1, h.integer("TFIELDS", 0) + 1):
            form = str(h.get(f"TFORM{i}", "")).strip().upper()
            m = _TFORM_RE.match(form)
            if m is None:
                raise FITSFormatError(f"TFORM{i} = {form!r} is not a FITS format")
            repeat = int(m.group(1)) if m.group(1) else 1
            code = m.group(2)
            width = (repeat + 7) // 8 if code == "X" else repeat * _TFORM[code][0]
            name = str(h.get(f"TTYPE{i}", f"COL{i}")).strip()
            self._cols.setdefault(name.upper(), (i, offset, code, repeat))
            offset += width
        if offset > self._width:
            raise FITSFormatError(
                f"the columns of table {hdu.name!r} need {offset} bytes a row; "
                f"NAXIS1 = {self._width}"
            )

    @property
    def names(self) -> list[str]:
        h = self._hdu.header
        return [str(h.get(f"TTYPE{i}")).strip() for i, *_ in self._cols.values()]

    def __contains__(self, name: str) -> bool:
        return name.strip().upper() in self._cols

    def column(self, name: str) -> np.ndarray:
        """Column `name`: `(rows,)` for a repeat of 1, else `(rows, repeat)`; `A`
        columns as `str` (trailing blanks dropped), `L` and `X` (bits) as bool."""
        try:
            i, offset, code, repeat = self._cols[name.strip().upper()]
        except KeyError:
            raise KeyError(f"no column {name!r} in table {self._hdu.name!r}") from None
        if code in ("P", "Q"):
            raise FITSFormatError(f"column {name!r} has variable-length arrays")
        if code == "A":
            fmt = np.dtype(f"S{repeat}")
        elif code == "X":
            fmt = np.dtype((">u1", ((repeat + 7) // 8,)))
        else:
            base = np.dtype(_TFORM[code][1])
            fmt = base if repeat == 1 else np.dtype((base, (repeat,)))
        dtype = np.dtype(
            {
                "names": ["c"],
                "formats": [fmt],
                "offsets": [offset],
                "itemsize": self._width,
            }
        )
        col = np.frombuffer(self._hdu.data, dtype, count=self._rows)["c"]
        if code == "A":
            return np.array([b.decode("ascii", "replace").rstrip() for b in col])
        if code == "L":
            return col == b"T"
        if code == "X":  # bits, first the most significant, as booleans
            bits = np.unpackbits(np.array(col, np.uint8), axis=-1)
            return bits[..., :repeat].astype(bool)
        h = self._hdu.header
        return _scaled(native(col), h.number(f"TSCAL{i}"), h.number(f"TZERO{i}"))
