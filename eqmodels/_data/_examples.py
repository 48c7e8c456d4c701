"""Data shipped with eqmodels: real EHT uvfits files (one Stokes I band, and both
bands of a day in full polarization), so that the command line, the examples and the
tests run anywhere the package is installed."""

import pathlib


# name -> file in `eqmodels/data/` (provenance and licence in its PROVENANCE.md).
_SHIPPED = {
    "m87_2017_04_10_lo": "SR1_M87_2017_100_lo_hops_netcal_StokesI.uvfits",
    "m87_2017_04_10_pol_lo": "SR2_M87_2017_100_lo_hops_zbl-dtcal+selfcal.uvfits",
    "m87_2017_04_10_pol_hi": "SR2_M87_2017_100_hi_hops_zbl-dtcal+selfcal.uvfits",
}


def example_uvfits(name: str = "m87_2017_04_10_lo") -> pathlib.Path:
    """The path of a uvfits file shipped inside the package.

    **Arguments:**

    - `name`: which file. Three are shipped, unmodified from the EHT Collaboration's
      public releases, which are licensed ODC-PDDL (public domain); their
      provenance is in `PROVENANCE.md` beside them:
        - `"m87_2017_04_10_lo"` (the default): M87 observed by the EHT on
          2017-04-10, low band (227 GHz), HOPS pipeline, network-calibrated
          Stokes I: 2367 records of 10 s over 7 stations (release 2019-D01-01,
          First M87 EHT Results, Paper III);
        - `"m87_2017_04_10_pol_lo"` and `"m87_2017_04_10_pol_hi"`: the same day's
          two bands (227.07 and 229.07 GHz) in **full polarization** (RR, LL, RL,
          LR; 1814 and 2010 records over 6 stations), HOPS pipeline with the
          zero-baseline D-terms of ALMA and APEX corrected and self-calibrated to
          the EHT's Stokes I images (`*_hops_zbl-dtcal+selfcal`, release
          2023-D01-01, M87 polarization Papers VII–IX). Read them with
          `load_uvfits(path, polarization="full")`; `eqmodels image --pol` images
          this pair when given no files.

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
