"""Data shipped with eqmodels: one real EHT uvfits file, so that the command line,
the examples and the tests run anywhere the package is installed."""

import pathlib


# name -> file in `eqmodels/data/` (provenance and licence in its PROVENANCE.md).
_SHIPPED = {
    "m87_2017_04_10_lo": "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits",
}


def example_uvfits(name: str = "m87_2017_04_10_lo") -> pathlib.Path:
    """The path of a uvfits file shipped inside the package.

    **Arguments:**

    - `name`: which file. One is shipped: `"m87_2017_04_10_lo"`, M87 observed by the
      EHT on 2017-04-10, low band (227 GHz), HOPS pipeline, network-calibrated
      Stokes I: 2367 records of 10 s over 7 stations, unmodified from the EHT
      Collaboration's public release 2019-D01-01 (First M87 EHT Results, Paper III),
      which is licensed ODC-PDDL (public domain). Its provenance is in
      `PROVENANCE.md` beside it.

    **Returns:**

    A `pathlib.Path` to the file, for [`eqmodels.load_uvfits`][] (or any uvfits
    reader).

    ```python
    data = em.load_uvfits(em.example_uvfits()).scan_average()
    ```
    """
    if name not in _SHIPPED:
        raise ValueError(
            f"example_uvfits: no shipped file is called {name!r}; the shipped "
            f"files are {', '.join(map(repr, _SHIPPED))}."
        )
    path = pathlib.Path(__file__).resolve().parents[1] / "data" / _SHIPPED[name]
    if not path.is_file():  # a broken installation, not a user error
        raise FileNotFoundError(
            f"example_uvfits: {str(path)!r} is missing from this installation of "
            "eqmodels: reinstall the package (`pip install --force-reinstall "
            "eqmodels`)."
        )
    return path
