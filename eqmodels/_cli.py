"""The `eqmodels` command line: `python -m eqmodels image LO.uvfits [HI.uvfits ...]
-o OUT.fits` runs the published 2017 M87 recipe ([`eqmodels.image_m87`][]);
`python -m eqmodels image` alone images the M87 file shipped with the package into
`m87.fits`."""

import argparse
import math
import os
import pathlib
import sys
import time
import warnings


# Where `eqmodels image` with no uvfits files (the shipped M87 file) writes.
_DEFAULT_OUTPUT = "m87.fits"


def plot_image(
    image, grid, path, *, title: str = "", beam=None, units="Jy/uas2", freq=None
) -> None:
    """The image saved as a PNG at `path` with [`eqmodels.plot_image`][] (µas axes,
    east left, a colour bar in Jy/µas² or, `units="Tb"`, in kelvin at `freq`; a
    `beam` FWHM in µas drawn; the `plot` extra). A Stokes image `(4, ny, nx)` is
    drawn with [`eqmodels.plot_polarization`][] (EVPA ticks over Stokes I)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ._plot._image import plot_image as draw
    from ._plot._polarization import plot_polarization

    image = np.asarray(image)
    if image.ndim == 3:
        fig, ax = plt.subplots(figsize=(5.4, 4))
        plot_polarization(
            image, grid, ax=ax, title=title or None, beam=beam, units=units
        )
    else:
        fig, ax = plt.subplots(figsize=(4.8, 4))
        draw(
            image, grid, ax=ax, title=title or None, beam=beam, units=units,
            freq=freq,
        )  # fmt: skip
    fig.tight_layout()
    from ._atomic import atomic_path

    try:
        # Atomically: a killed process leaves the previous plot, or the new one.
        fmt = pathlib.Path(path).suffix.lstrip(".").lower() or None
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    finally:
        plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="eqmodels", description="eqmodels command line tools."
    )
    ap.add_argument("--version", action="version", version=_version())
    sub = ap.add_subparsers(dest="command", required=True)
    im = sub.add_parser(
        "image",
        help="image uvfits data with the published 2017 M87 eht-imaging recipe",
        description=(
            "Image one day's uvfits files (e.g. the low and high band) with the "
            "published 2017 M87 recipe (EHT Paper IV): four rounds of L-BFGS with "
            "restarts and self-calibration; writes a FITS image."
        ),
    )
    im.set_defaults(parser=im)
    im.add_argument(
        "uvfits", nargs="*",
        help=(
            "uvfits files (one day's bands); none: the M87 2017-04-10 low-band "
            "file shipped with eqmodels (`eqmodels.example_uvfits()`)"
        ),
    )  # fmt: skip
    im.add_argument(
        "-o", "--output", default=None,
        help=f"output FITS image (needed with uvfits files; {_DEFAULT_OUTPUT} without)",
    )  # fmt: skip
    im.add_argument(
        "--overwrite", action="store_true",
        help="replace existing output files (refused without it)",
    )  # fmt: skip
    im.add_argument("--npix", type=int, default=64, help="pixels per side (64)")
    im.add_argument("--fov", type=float, default=128.0, help="field of view, µas (128)")
    im.add_argument(
        "--iterations", type=int, default=None,
        help="L-BFGS steps per run (100; 30 with --fast)",
    )  # fmt: skip
    im.add_argument(
        "--restarts", type=int, default=None,
        help="restarts from the blurred result per round (3; 1 with --fast)",
    )  # fmt: skip
    im.add_argument(
        "--fast", action="store_true",
        help="few iterations and restarts (for CI and demos)",
    )  # fmt: skip
    im.add_argument(
        "--zbl", type=float, default=None,
        help="compact (zero-baseline) flux in Jy (0.6, M87's)",
    )  # fmt: skip
    im.add_argument(
        "--zbl-anyway", action="store_true",
        help="take a --zbl more than 10x from the data's zero-baseline flux",
    )  # fmt: skip
    im.add_argument(
        "--png", default=None,
        help="also save a plot of the image (.png, .pdf, .svg, ...)",
    )  # fmt: skip
    im.add_argument(
        "--pol", action="store_true",
        help=(
            "full polarization (eqmodels.image_m87_pol): the Stokes I recipe, then "
            "Q and U (V with --stokes-v) and the uncorrected stations' D-terms; "
            "give one day's two polarimetric files LO HI (none: the shipped "
            "2017-04-10 pair); writes a four-plane (I, Q, U, V) FITS image"
        ),
    )  # fmt: skip
    im.add_argument(
        "--stokes-v", action="store_true",
        help="with --pol: also image Stokes V (else V = 0)",
    )  # fmt: skip
    im.add_argument(
        "--cache", default=None, metavar="DIR",
        help=(
            "JAX's persistent compilation cache (default $EQMODELS_CACHE_DIR or "
            "~/.cache/eqmodels/jax): a second run skips XLA's compilation"
        ),
    )  # fmt: skip
    im.add_argument(
        "--no-cache", action="store_true",
        help="compile everything anew; read and write no compilation cache",
    )  # fmt: skip
    _add_newcomer_options(im)
    _add_multifreq_option(im)
    return ap


def _check_paths(ap: argparse.ArgumentParser, args) -> None:
    """Refuse, before any imaging, paths that would fail after it. With no uvfits
    files, the shipped M87 file is imaged into `m87.fits` unless `-o` says where."""
    if not args.uvfits:
        from ._data._examples import example_uvfits

        args.uvfits = [str(example_uvfits())]
        if args.output is None:
            args.output = _DEFAULT_OUTPUT
    elif args.output is None:
        ap.error(
            "-o/--output is needed with uvfits files: give the output FITS image's "
            "name (only the shipped example, imaged when no files are given, has a "
            f"default: {_DEFAULT_OUTPUT})."
        )
    for path in args.uvfits:
        if not pathlib.Path(path).is_file():
            ap.error(f"uvfits file {path!r} does not exist (or is not a file).")
    for option, path in (("-o/--output", args.output), ("--png", args.png)):
        if path is None:
            continue
        out = pathlib.Path(path)
        if not path:
            ap.error(f"{option} is empty: give a file name.")
        if out.is_dir():
            ap.error(f"{option} {path!r} is a folder: give a file name.")
        if path.endswith(("/", os.sep)):
            ap.error(f"{option} {path!r} names a folder: give a file name.")
        # The folder as the system will open it: `resolve()` would collapse
        # `missing/..` on paper, but opening the file goes through `missing`.
        if not out.parent.is_dir():
            ap.error(
                f"{option} {path!r}: the folder {str(out.parent)!r} does not exist."
            )
        if (
            out.exists()
            and not args.overwrite
            and out.resolve() not in {pathlib.Path(p).resolve() for p in args.uvfits}
        ):  # (an input file given as an output is refused below, as such)
            ap.error(
                f"{option} {path!r} exists: pass --overwrite to replace it, or give "
                "another name."
            )
        # Writable (`os.access` reports a read-only file system even to root), and
        # the file itself too when it exists: found now, not after the imaging.
        target = out if out.exists() else out.parent
        if not os.access(target, os.W_OK) or not _can_create_in(out.parent):
            ap.error(f"{option} {path!r}: {str(target)!r} is not writable.")
    inputs = {pathlib.Path(p).resolve() for p in args.uvfits}
    if len(inputs) < len(args.uvfits):
        ap.error("a uvfits file is given twice: give each band once.")
    for option, path in (("-o/--output", args.output), ("--png", args.png)):
        if path is not None and pathlib.Path(path).resolve() in inputs:
            ap.error(f"{option} {path!r} is one of the input files: give another name.")
    if not args.output.lower().endswith(_FITS_SUFFIXES):
        ap.error(
            f"-o/--output {args.output!r} is not a FITS file name: end it in "
            f"{', '.join(_FITS_SUFFIXES)} (a plot goes to --png)."
        )
    if args.png is not None:
        if pathlib.Path(args.png).resolve() == pathlib.Path(args.output).resolve():
            ap.error(f"--png {args.png!r} is the -o/--output file: give another name.")
    if args.cache is not None and args.no_cache:
        ap.error("--cache and --no-cache contradict each other: give one.")
    if args.cache is not None and pathlib.Path(args.cache).is_file():
        ap.error(f"--cache {args.cache!r} is a file: give a folder (created if new).")
    if args.png is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("--png needs matplotlib: pip install 'eqmodels[plot]'.")
        suffix = pathlib.Path(args.png).suffix.lower().lstrip(".")
        if suffix not in _plot_formats():
            ap.error(
                f"--png {args.png!r}: give a file name ending in an image format's "
                f"suffix ({', '.join('.' + f for f in _plot_formats())})."
            )
    for option, value, low in (
        ("--npix", args.npix, 1),
        ("--iterations", args.iterations, 1),
        ("--restarts", args.restarts, 0),
    ):
        if value is not None and value < low:
            ap.error(f"{option} must be >= {low}, got {value}.")
    need, have = _LEAST_IMAGES * 8 * args.npix**2, _physical_memory()
    if have is not None and need > have:
        ap.error(
            f"--npix {args.npix} needs at least {need / 2**30:.0f} GiB (the L-BFGS "
            f"memory alone holds {_LEAST_IMAGES} float64 images of {args.npix}²), more "
            f"than this machine's {have / 2**30:.0f} GiB; the published recipe "
            "uses 64."
        )
    if not (math.isfinite(args.fov) and args.fov >= 80.0):  # the recipe's prior
        ap.error(
            f"--fov must be at least 80 µas (the prior's offset copy sits 40 µas "
            f"from the centre), got {args.fov}."
        )
    if args.zbl is not None and not (math.isfinite(args.zbl) and args.zbl > 0):
        ap.error(f"--zbl must be a positive flux in Jy, got {args.zbl}.")


# The names `-o` takes (astropy compresses `.gz` names).
_FITS_SUFFIXES = (".fits", ".fit", ".fts", ".fits.gz", ".fit.gz", ".fts.gz")


def _can_create_in(folder: pathlib.Path) -> bool:
    """Whether a file can be created in `folder` (where the outputs' temporary
    files go before they are renamed into place): tried, not inferred."""
    import tempfile

    try:
        fd, name = tempfile.mkstemp(prefix=".tmp-eqmodels-check-", dir=folder)
    except OSError:
        return False
    os.close(fd)
    os.unlink(name)
    return True


# Image-sized float64 arrays an L-BFGS solve holds at least: its memory of 10
# (step, gradient change) pairs and their two newest companions.
_LEAST_IMAGES = 22


def _physical_memory() -> int | None:
    """This machine's memory in bytes, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _show_warning(message, category, *args, **kwargs) -> None:
    print(f"eqmodels image: warning: {message}", file=sys.stderr, flush=True)


def _plot_formats() -> tuple[str, ...]:
    """The file suffixes matplotlib saves to (`png`, `pdf`, `svg`, ...) without
    anything beyond matplotlib (`pgf` needs a LaTeX installation); none without
    matplotlib (then `--png` is refused for that reason first)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase
    except ImportError:
        return ()
    return tuple(sorted(set(FigureCanvasBase.get_supported_filetypes()) - {"pgf"}))


def main(argv=None) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    _check_pol(args.parser, args)
    _check_multifreq(args.parser, args)
    _check_paths(args.parser, args)  # errors as `eqmodels image: error: ...`
    _check_picture_and_source(args.parser, args)
    t0 = time.perf_counter()
    try:
        if args.multifreq:
            return _image_multifreq(args, t0)
        return _image_pol(args, t0) if args.pol else _image(args, t0)
    except (ValueError, OSError) as e:  # bad data or settings: a message, not a trace
        print(f"eqmodels image: error: {e}", file=sys.stderr)
        return 2


def _start(args, header: str):
    """What every recipe run does first: float64, the package, a flushed `log`,
    the compilation cache (unless `--no-cache`), and the run's first line."""
    import jax

    jax.config.update("jax_enable_x64", True)
    import eqmodels as em

    def log(line):
        print(line, flush=True)

    if not args.no_cache:
        _enable_cache(em, args.cache, log)
    log(header)
    return em, log


def _recipe_options(args, log) -> dict:
    """The options the recipes share, from the command line."""
    return dict(
        npix=args.npix,
        fov=args.fov,
        iterations=args.iterations,
        restarts=args.restarts,
        fast=args.fast,
        log=log,
        **({} if args.zbl is None else {"zbl": args.zbl}),
        **_source_settings(args),
    )


def _picture(args, draw, log, written: str) -> int:
    """`--png`: `draw()` writes it; a failure is a message (exit 2) ending with
    `written`, which says what was written all the same."""
    if not args.png:
        return 0
    try:
        draw()
    except Exception as e:  # noqa: BLE001 - the image is written: say so
        print(
            f"eqmodels image: error: --png {args.png!r} could not be written "
            f"({type(e).__name__}: {e}); {written}.",
            file=sys.stderr,
        )
        return 2
    log(f"wrote {args.png}")
    return 0


def _image(args, t0) -> int:
    em, log = _start(args, f"eqmodels image: {', '.join(args.uvfits)} -> {args.output}")
    with warnings.catch_warnings():  # the recipe's warnings as one line each
        warnings.showwarning = _show_warning
        image, report = em.image_m87(
            args.uvfits, check_zbl=not args.zbl_anyway, **_recipe_options(args, log)
        )
    data, grid = report["data"], report["grid"]
    em.save_fits(image, grid, args.output, overwrite=args.overwrite, data=data)
    log(f"wrote {args.output}")
    draw = lambda: _save_picture(args, image, grid, data)  # noqa: E731
    if _picture(args, draw, log, f"the image {args.output!r} was"):
        return 2
    log(f"total wall time {time.perf_counter() - t0:.1f} s")
    return 0


# Where `eqmodels image --pol` with no uvfits files (the shipped pair) writes.
_DEFAULT_POL_OUTPUT = "m87_pol.fits"


def _check_pol(ap: argparse.ArgumentParser, args) -> None:
    """`--pol`'s own checks (before `_check_paths`): two files, LO and HI, or none
    (the shipped 2017-04-10 pair into `m87_pol.fits`); no `--tb` (the picture
    is Stokes I in Jy/µas² with the |m| ticks); and `--stokes-v` only with
    `--pol`."""
    if args.pol and args.multifreq:
        ap.error(
            "--pol and --multifreq are separate recipes: give one (multi-frequency "
            "polarimetric imaging is not in the command line yet)."
        )
    if not args.pol:
        if args.stokes_v:
            ap.error("--stokes-v needs --pol (Stokes V is imaged with Q and U).")
        return
    if args.tb:
        ap.error(
            "--tb is not offered with --pol: the polarization picture's colour bars "
            "are Stokes I in Jy/µas² and the fractional polarization |m|."
        )
    if not args.uvfits:
        from ._data._examples import example_uvfits

        args.uvfits = [
            str(example_uvfits("m87_2017_04_10_pol_lo")),
            str(example_uvfits("m87_2017_04_10_pol_hi")),
        ]
        if args.output is None:
            args.output = _DEFAULT_POL_OUTPUT
    elif len(args.uvfits) != 2:
        ap.error(
            f"--pol takes one day's two bands, LO HI (polarimetric uvfits files); "
            f"got {len(args.uvfits)} file(s)."
        )


def _image_pol(args, t0) -> int:
    """`eqmodels image --pol`: [`eqmodels.image_m87_pol`][], the four-plane FITS
    image, and the polarization papers' numbers and the fitted D-terms."""
    em, log = _start(
        args, f"eqmodels image --pol: {', '.join(args.uvfits)} -> {args.output}"
    )
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        stokes, report = em.image_m87_pol(
            *args.uvfits, stokes_v=args.stokes_v, **_recipe_options(args, log)
        )
    grid, data = report["grid"], report["stokes_i"]["data"]
    em.save_fits(stokes, grid, args.output, overwrite=args.overwrite, data=data)
    log(f"wrote {args.output} (Stokes I, Q, U, V)")
    draw = lambda: _save_picture(args, stokes, grid, report["data"])  # noqa: E731
    if _picture(args, draw, log, f"the image {args.output!r} was"):
        return 2
    for label, key in (("image", "summary"), ("blurred to 20 µas", "summary_20uas")):
        s = report[key]
        log(
            f"polarization ({label}): |m_net| {s['m_net']:.4f}  <|m|> "
            f"{s['m_avg']:.4f}  |β2| {s['beta2_abs']:.4f}  ∠β2 "
            f"{s['beta2_arg_deg']:.1f}°  EVPA_net {s['evpa_net_deg']:.1f}°  "
            f"v_net {s['v_net']:.4f}"
        )
    if "summary_20uas_ring" in report:
        from ._recipe._m87_pol import RING_ANNULUS_UAS

        s, ring, uas = report["summary_20uas_ring"], report["ring"], em.uas_to_rad(1.0)
        log(
            f"β2 about the ring's centre ({ring['x0'] / uas:+.1f}, "
            f"{ring['y0'] / uas:+.1f}) µas, radius {ring['radius'] / uas:.1f} µas, "
            f"in the annulus ±{RING_ANNULUS_UAS:g} µas (20 µas): |β2| "
            f"{s['beta2_abs']:.4f}  ∠β2 {s['beta2_arg_deg']:.1f}°"
        )
    log("D-terms (d_R, d_L; fitted: " + ", ".join(report["fitted"]) + "):")
    for station, bands in report["dterms"].items():
        cells = "  ".join(
            f"{b} {dr.real:+.3f}{dr.imag:+.3f}i {dl.real:+.3f}{dl.imag:+.3f}i"
            for b, (dr, dl) in bands.items()
        )
        log(f"  {station}: {cells}")
    log(f"total wall time {time.perf_counter() - t0:.1f} s")
    return 0


def _enable_cache(em, path, log) -> None:
    """The persistent compilation cache at `path` (`--cache`), else at
    `enable_compilation_cache`'s default folder. An unusable default folder (a
    read-only home) costs only speed: a note, and the run goes on without it; a
    folder the user named is an error."""
    try:
        where = em.enable_compilation_cache(path)
    except (OSError, ValueError) as e:
        if path is not None:
            raise OSError(f"--cache {path!r}: {e}") from e
        log(f"compilation cache off (its default folder is unusable: {e})")
        return
    log(f"compilation cache: {where} (--no-cache to turn it off)")


# ------------------------------------------------ the picture, the source, --version
# The EHT's restoring beam for its published 2017 images (Paper IV): 20 µas FWHM.
_EHT_BEAM_UAS = 20.0


def _version() -> str:
    from . import __version__

    return f"eqmodels {__version__}"


def _add_newcomer_options(im: argparse.ArgumentParser) -> None:
    """The picture's options (`--restore-beam`, `--tb`) and another source's
    settings (`--prior-fwhm`)."""
    im.add_argument(
        "--restore-beam", nargs="?", type=float, const=_EHT_BEAM_UAS, default=None,
        metavar="UAS",
        help=(
            "draw the --png picture restored with a circular Gaussian beam of this "
            f"FWHM in µas ({_EHT_BEAM_UAS:g}, the EHT's, when given bare), the beam "
            "drawn; the FITS image is not restored"
        ),
    )  # fmt: skip
    im.add_argument(
        "--tb", action="store_true",
        help="the --png picture's colour bar in brightness temperature (K)",
    )  # fmt: skip
    im.add_argument(
        "--prior-fwhm", type=float, default=None, metavar="UAS",
        help=(
            "FWHM of the Gaussian prior and first image, µas (40, M87's); another "
            "source than M87 needs it and --zbl"
        ),
    )  # fmt: skip


def _check_picture_and_source(ap: argparse.ArgumentParser, args) -> None:
    """Refuse, before any imaging, picture options without a picture, and a
    restoring beam or prior size that is not a positive size within the field."""
    for option, given in (("--restore-beam", args.restore_beam), ("--tb", args.tb)):
        if given not in (None, False) and args.png is None:
            ap.error(f"{option} changes the picture only: give --png FILE too.")
    for option, value in (
        ("--restore-beam", args.restore_beam),
        ("--prior-fwhm", args.prior_fwhm),
    ):
        if value is not None and not (math.isfinite(value) and 0 < value):
            ap.error(f"{option} must be a positive FWHM in µas, got {value}.")
    if args.restore_beam is not None and args.restore_beam >= args.fov:
        ap.error(
            f"--restore-beam {args.restore_beam:g} µas is not smaller than the field "
            f"of view (--fov {args.fov:g} µas)."
        )
    if args.prior_fwhm is not None and not args.fov >= 2 * args.prior_fwhm:
        ap.error(
            f"--fov must be at least twice --prior-fwhm ({2 * args.prior_fwhm:g} "
            f"µas: the prior's offset copy sits one FWHM from the centre), got "
            f"{args.fov:g}."
        )


def _source_settings(args) -> dict:
    return {} if args.prior_fwhm is None else {"prior_fwhm": args.prior_fwhm}


def _save_picture(args, image, grid, data) -> None:
    """The --png picture: titled with the source, calendar date, band(s) and
    frequency; restored with `--restore-beam` (the beam drawn), in kelvin with
    `--tb` (at the bands' mean frequency)."""
    import numpy as np

    from ._data._recipe_ops import blur_image
    from ._plot._image import observation_title
    from ._units import uas_to_rad

    freqs = data.band_freqs
    # Two lines (source and date; bands and frequency), to fit over the image.
    title = observation_title(data.source, data.mjd, freqs).replace(", ", "\n", 1)
    beam = args.restore_beam
    if beam is not None:
        image = np.asarray(image)  # every Stokes plane of a `(4, ny, nx)` image
        planes = image if image.ndim == 3 else image[None]
        blurred = [np.asarray(blur_image(p, grid, uas_to_rad(beam))) for p in planes]
        image = np.stack(blurred) if image.ndim == 3 else blurred[0]
        title += f", {beam:g} µas beam"
    plot_image(
        image, grid, args.png, title=title, beam=beam,
        units="Tb" if args.tb else "Jy/uas2", freq=float(np.mean(freqs)),
    )  # fmt: skip


# ------------------------------------------------ --multifreq (issue 40)
def _add_multifreq_option(im: argparse.ArgumentParser) -> None:
    im.add_argument(
        "--multifreq", action="store_true",
        help=(
            "the uvfits files are bands of one observation (two or more, e.g. "
            "2018's b1-b4): the Stokes I recipe per band, then one joint round "
            "fitting the image at the bands' mean frequency and a spectral-index "
            "map; writes OUT.fits (the image) and OUT_alpha.fits (alpha)"
        ),
    )  # fmt: skip


def alpha_path(output: str) -> str:
    """Where `--multifreq` writes the spectral-index map: `OUT_alpha.fits` beside
    `OUT.fits` (the FITS suffix kept: `OUT_alpha.fits.gz` for `OUT.fits.gz`)."""
    for suffix in sorted(_FITS_SUFFIXES, key=len, reverse=True):
        if output.lower().endswith(suffix):
            return output[: -len(suffix)] + "_alpha" + output[-len(suffix) :]
    return output + "_alpha.fits"


def _check_multifreq(ap: argparse.ArgumentParser, args) -> None:
    """`--multifreq` needs two or more bands, takes no picture options of the
    one-image picture, and its α file must be writable as -o's is."""
    if not args.multifreq:
        return
    if len(args.uvfits) < 2:
        ap.error(
            f"--multifreq needs two or more uvfits files (one per band), got "
            f"{len(args.uvfits)}."
        )
    if args.output is None:
        ap.error("-o/--output is needed with --multifreq: give the image's name.")
    for option, given in (("--restore-beam", args.restore_beam), ("--tb", args.tb)):
        if given not in (None, False):
            ap.error(f"{option} is not available with --multifreq.")
    if not args.output.lower().endswith(_FITS_SUFFIXES):
        return  # refused by `_check_paths` as for one image
    alpha = pathlib.Path(alpha_path(args.output))
    inputs = {pathlib.Path(p).resolve() for p in args.uvfits}
    if alpha.resolve() in inputs:
        ap.error(f"the alpha map {str(alpha)!r} would replace an input file.")
    if alpha.exists() and not args.overwrite:
        ap.error(
            f"the alpha map {str(alpha)!r} (beside -o) exists: pass --overwrite to "
            "replace it, or give another -o."
        )
    if args.png is not None and pathlib.Path(args.png).resolve() == alpha.resolve():
        ap.error(f"--png {args.png!r} is the alpha map's file: give another name.")


def _image_multifreq(args, t0) -> int:
    import numpy as np

    alpha_file = alpha_path(args.output)
    em, log = _start(
        args,
        f"eqmodels image --multifreq: {', '.join(args.uvfits)} -> {args.output}, "
        f"{alpha_file}",
    )
    with warnings.catch_warnings():
        warnings.showwarning = _show_warning
        model, report = em.image_multifreq(
            args.uvfits, check_zbl=not args.zbl_anyway, **_recipe_options(args, log)
        )
    grid, data, freq0 = report["grid"], report["data"][0], report["freq0"]
    image, alpha = np.asarray(model()), np.asarray(model.alpha)
    em.save_fits(image, grid, args.output, overwrite=args.overwrite, data=data,
                 freq=freq0)  # fmt: skip
    em.save_fits(alpha, grid, alpha_file, overwrite=args.overwrite, data=data,
                 freq=freq0)  # fmt: skip
    _mark_alpha(alpha_file)
    log(f"wrote {args.output} and {alpha_file}")
    draw = lambda: _save_multifreq_picture(args.png, image, alpha, grid, report)  # noqa: E731
    if _picture(args, draw, log, "the images were"):
        return 2
    log(f"total wall time {time.perf_counter() - t0:.1f} s")
    return 0


def _mark_alpha(path: str) -> None:
    """The α file's unit: dimensionless (save_fits writes JY/PIXEL)."""
    from astropy.io import fits

    with fits.open(path, mode="update") as hdul:
        hdul[0].header["BUNIT"] = ("", "spectral index: dimensionless")
        hdul[0].header["BTYPE"] = "SPECTRAL INDEX"
        hdul[0].header["COMMENT"] = "I_nu = I_0 (nu/nu_0)^alpha, nu_0 = CRVAL of FREQ"


#: α is drawn where `I₀` exceeds this fraction of its peak.
ALPHA_MASK = 0.05


def _save_multifreq_picture(path, image, alpha, grid, report) -> None:
    """`I₀` and α side by side, α masked where `I₀ < 5 %` of its peak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from ._atomic import atomic_path
    from ._plot._image import image_extent, plot_image as draw

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 4))
    freq0 = report["freq0"]
    draw(image, grid, ax=ax1, title=f"I at {freq0 / 1e9:.2f} GHz")
    masked = np.ma.masked_where(image < ALPHA_MASK * image.max(), alpha)
    art = ax2.imshow(masked, origin="upper", extent=image_extent(grid), cmap="RdBu_r",
                     vmin=-np.abs(masked).max(), vmax=np.abs(masked).max())  # fmt: skip
    ax2.set_title(f"spectral index α (I > {ALPHA_MASK:.0%} of peak)")
    ax2.set_xlabel(ax1.get_xlabel())
    ax2.set_ylabel(ax1.get_ylabel())
    fig.colorbar(art, ax=ax2, label="α")
    fig.tight_layout()
    try:
        fmt = pathlib.Path(path).suffix.lstrip(".").lower() or None
        with atomic_path(path) as tmp:
            fig.savefig(tmp, dpi=120, format=fmt)
    finally:
        plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
