"""Station tables (names, ECEF positions, SEFDs) and the shipped EHT 2017 array."""

from collections.abc import Callable

import equinox as eqx
import numpy as np
from jaxtyping import ArrayLike, Float


class StationTable(eqx.Module):
    """A table of stations: names, Earth-fixed (ECEF) positions and system
    equivalent flux densities, the input of [`eqmodels.observe`][].

    Positions are geocentric `(X, Y, Z)` in metres (X toward the Greenwich
    meridian on the equator, Z toward the north pole); SEFDs in Jy (per
    polarisation, at the observing frequency); `el_min` is each station's
    elevation limit in degrees. The arrays are host (numpy, float64) arrays.
    """

    names: tuple[str, ...] = eqx.field(static=True)
    xyz: Float[np.ndarray, "n_st 3"]
    sefd: Float[np.ndarray, " n_st"]
    el_min: Float[np.ndarray, " n_st"]

    def __init__(
        self,
        names,
        xyz: ArrayLike | list | tuple,
        sefd: ArrayLike | list | tuple,
        el_min: ArrayLike | list | tuple = 10.0,
    ):
        """**Arguments:**

        - `names`: station codes, unique strings (e.g. `("AA", "AP", ...)`).
        - `xyz`: ECEF positions in metres, shape `(n_st, 3)`.
        - `sefd`: system equivalent flux density of each station in Jy (> 0).
        - `el_min`: elevation limit in degrees, one for all or one per station.
        """
        names = _check_names("names", names)
        n = len(names)
        xyz = np.asarray(xyz, np.float64)
        if xyz.shape != (n, 3):
            raise ValueError(
                f"`xyz` must have shape (n_stations, 3) = ({n}, 3), got {xyz.shape}."
            )
        if not np.all(np.isfinite(xyz)):
            raise ValueError("`xyz` has non-finite station positions.")
        radius = np.linalg.norm(xyz, axis=1)
        if np.any((radius < 6.0e6) | (radius > 6.5e6)):
            bad = names[int(np.argmax((radius < 6.0e6) | (radius > 6.5e6)))]
            raise ValueError(
                f"station {bad!r} is {radius.max():.4g} m from the Earth's centre: "
                "`xyz` must be geocentric (ECEF) positions in metres."
            )
        sefd = _per_station("sefd", sefd, n)
        if not np.all(np.isfinite(sefd) & (sefd > 0)):
            raise ValueError("`sefd` must be finite and > 0 (Jy) for every station.")
        el_min = _per_station("el_min", el_min, n)
        if not np.all(np.isfinite(el_min) & (el_min >= -90) & (el_min < 90)):
            raise ValueError("`el_min` must be an elevation in degrees in [-90, 90).")
        self.names = names
        # Host metadata (numpy float64): building the shipped table at import
        # does not start a JAX backend.
        self.xyz = np.array(xyz)
        self.sefd = np.array(sefd)
        self.el_min = np.array(el_min)

    def __len__(self) -> int:
        return len(self.names)

    def select(self, names) -> "StationTable":
        """The sub-table of the stations `names` (in the order given)."""
        names = _check_names("names", names)
        missing = [s for s in names if s not in self.names]
        if missing:
            raise ValueError(
                f"unknown station(s) {missing}; this table has {list(self.names)}."
            )
        idx = [self.names.index(s) for s in names]
        return StationTable(
            names,
            np.asarray(self.xyz)[idx],
            np.asarray(self.sefd)[idx],
            np.asarray(self.el_min)[idx],
        )

    def __repr__(self) -> str:
        rows = ", ".join(
            f"{s}: {float(f):.4g} Jy" for s, f in zip(self.names, np.asarray(self.sefd))
        )
        return f"StationTable({len(self.names)} stations; SEFD {rows})"


def _per_station(arg: str, x, n: int) -> np.ndarray:
    """`x` as `(n,)` float64: one value for every station, or one per station."""
    arr = np.asarray(x)
    if arr.dtype == bool or not np.issubdtype(arr.dtype, np.number):
        raise TypeError(f"`{arg}` must be numeric, got {x!r}.")
    if np.iscomplexobj(arr):
        raise TypeError(f"`{arg}` must be real, got a complex array.")
    if arr.ndim == 0:
        return np.full(n, float(arr))
    if arr.shape != (n,):
        raise ValueError(
            f"`{arg}` must be one value for every station or one per station, shape "
            f"({n},) for the {n} names, got shape {arr.shape}."
        )
    return arr.astype(np.float64)


def _check_names(arg: str, names) -> tuple[str, ...]:
    if isinstance(names, str):
        names = (names,)
    try:
        names = tuple(names)
    except TypeError:
        raise TypeError(f"`{arg}` must be a sequence of station names, got {names!r}.")
    if not names:
        raise ValueError(f"`{arg}` is empty: give at least one station name.")
    for s in names:
        if not isinstance(s, str) or not s:
            raise TypeError(f"`{arg}` must hold non-empty strings, got {s!r}.")
    if len(set(names)) != len(names):
        raise ValueError(f"`{arg}` has repeated station names: {list(names)}.")
    return names


def station_entries(
    table: dict,
    station_names,
    arg: str,
    check: Callable,
    reserved=(),
    active=None,
    unnamed: str = "0 for none",
) -> dict:
    """`{key: check(f"{arg}[{key!r}]", value)}` over a per-station table
    `{station: value}` (a dict of station settings, such as systematic noise or
    gain tolerances), kept for the stations of `station_names` (and the keys of
    `reserved`, such as `"default"`), in the table's order.

    Entries for stations absent from `station_names` are dropped, after their
    values are checked: they apply to no data here, so one table serves every day
    of an array (eht-imaging reads its dicts the same way, by the data's
    stations). Keys must be strings, and one that differs from a present station's
    name, or from a reserved key, only in letter case is refused as a misspelling
    of it: codes are case-sensitive. A key that is neither a station of the data,
    a reserved key, nor an EHT station code (`KNOWN_STATION_CODES`) is refused: a
    misspelt `"defualt"` would otherwise be dropped, leaving the default as it was. `"default"` is refused where it is not a
    reserved key (the table then has no default).

    A table that drops entries **and** leaves out some of the `active` stations
    (those with data; default all of `station_names`), without a reserved key, is
    refused: it is most likely written for another naming of the array (the 2018
    EHT files call APEX `AX` where 2017's call it `AP`), and would leave those
    stations at the unnamed stations' setting without a word. `unnamed` says, in
    that message, how to give a station the setting of the unnamed ones.
    """
    present = set(station_names)
    folded = {s.casefold(): s for s in station_names}
    folded_reserved = {r.casefold(): r for r in reserved}
    kept = {}
    dropped = []
    for key, value in table.items():
        if not isinstance(key, str):
            raise TypeError(
                f"`{arg}` must be keyed by station names (strings), got {key!r}."
            )
        if key not in present and key not in reserved:
            near = folded.get(key.casefold())
            if near is not None:
                raise ValueError(
                    f"`{arg}` names station {key!r}, which is {near!r} here (station "
                    "codes are case-sensitive)."
                )
            near = folded_reserved.get(key.casefold())
            if near is not None:
                raise ValueError(
                    f"`{arg}` has a key {key!r}: the key for the stations it does not "
                    f"name is {near!r} (case-sensitive)."
                )
            if key.casefold() == "default":
                raise ValueError(
                    f"`{arg}` takes no {key!r} key: name each station (stations it "
                    "does not name get none)."
                )
            if key not in KNOWN_STATION_CODES:
                # Not a station of these data, nor of any EHT array: a misspelt
                # key ("defualt", "LMT") would otherwise be dropped without a word.
                fix = (
                    f"the key for the stations it does not name is {reserved[0]!r}"
                    if reserved
                    else "stations it does not name get none"
                )
                raise ValueError(
                    f"`{arg}` has a key {key!r}, which is neither a station of these "
                    f"data {list(station_names)}"
                    + (f" nor {list(reserved)}" if reserved else "")
                    + f" nor an EHT station code ({fix}). Entries for EHT stations "
                    "absent from the data are ignored (one table serves every day "
                    "of the array); for another array, keep the data's stations: "
                    f"`{{k: v for k, v in {arg}.items() if k in data.station_names}}`."
                )
        checked = check(f"{arg}[{key!r}]", value)
        if key in present or key in reserved:
            kept[key] = checked
        else:
            dropped.append(key)
    active = station_names if active is None else active
    left_out = [s for s in active if s not in kept]
    if dropped and left_out and not any(r in kept for r in reserved):
        raise ValueError(
            f"`{arg}` names stations absent from these data ({dropped}) and leaves "
            f"out stations that have data ({left_out}): a table for another naming "
            "of the array (the 2018 EHT files code APEX, JCMT, SMA and SMT as AX, "
            "MM, SW and MG, where 2017's use AP, JC, SM and AZ)? Give the stations "
            f"it leaves out entries of their own ({unnamed})."
        )
    return kept


# The EHT 2017 array (230 GHz).
# - Positions: the AIPS AN tables of the EHT 2017 public data releases (M87
#   2019-D01-01 for AA AP AZ JC LM PV SM; Sgr A* 2022-D02-01 for SP), metres ECEF.
# - SEFDs: typical 2017 station SEFDs in Jy from The EHT Collaboration 2019,
#   "First M87 EHT Results. II. Array and Instrumentation", ApJL 875, L2, Table 2
#   (see also Paper III, ApJL 875, L3, for the a-priori amplitude calibration).
#   These are representative median values; they were not re-checked against the
#   published table text when this file was written, so treat them as typical,
#   not as the calibration of any one night.
# Codes follow the 2017 uvfits files: AA = phased ALMA, AP = APEX, AZ = SMT
# (Arizona), JC = JCMT, LM = LMT, PV = IRAM 30 m (Pico Veleta), SM = SMA (phased),
# SP = SPT (South Pole).
_EHT2017_ROWS = (
    ("AA", (2225060.8136, -5440059.59994, -2481681.15054), 74.0),
    ("AP", (2225039.5297, -5441197.6292, -2479303.3597), 4700.0),
    ("AZ", (-1828796.2, -5054406.8, 3427865.2), 17100.0),
    ("JC", (-5464584.676, -2493001.17, 2150653.982), 10500.0),
    ("LM", (-768715.632, -5988507.072, 2063354.852), 4500.0),
    ("PV", (5088967.74544, -301681.18586, 3825012.20561), 1900.0),
    ("SM", (-5464555.493, -2492927.989, 2150797.176), 6200.0),
    ("SP", (809.7616, -816.848, -6359568.7286), 19300.0),
)

#: The station codes of the EHT arrays (the 2017 array; the 2018 files' codes of
#: the 2017 sites, AX MM SW MG; and the later stations GL KT NN): a key of a
#: per-station table that is none of these nor a station of the data is refused.
KNOWN_STATION_CODES = frozenset(
    [r[0] for r in _EHT2017_ROWS] + ["AX", "MM", "SW", "MG", "GL", "KT", "NN"]
)

#: The EHT 2017 array: stations, ECEF positions and typical SEFDs (Jy), elevation
#: limit 10°. Use `EHT2017.select([...])` for a subset (SP never sees M87).
EHT2017 = StationTable(
    tuple(r[0] for r in _EHT2017_ROWS),
    np.array([r[1] for r in _EHT2017_ROWS]),
    np.array([r[2] for r in _EHT2017_ROWS]),
    10.0,
)
