"""Plots (Agg backend): image orientation and extent, colour-bar units against a
hand computation, a shared colour scale, both conjugate (u, v) points, the data
plots' model overlays, PNG output, and the lazy matplotlib import."""

import subprocess
import sys

import matplotlib


matplotlib.use("Agg")

import jax.numpy as jnp  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import eqmodels as em  # noqa: E402
from tests.unchecked import unchecked_error  # noqa: E402


GRID = em.ImageGrid(8, 10, em.uas_to_rad(5.0))  # 40 µas × 50 µas


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _data():
    rng = np.random.default_rng(0)
    n = 12
    u, v = rng.uniform(-3e9, 3e9, (2, n))
    ant1 = np.array([0, 0, 1] * 4)
    ant2 = np.array([1, 2, 2] * 4)
    time = np.repeat(np.arange(4.0), 3)
    vis = rng.normal(size=n) + 1j * rng.normal(size=n)
    return em.VisData(
        u,
        v,
        vis,
        np.full(n, 0.1),
        time,
        ant1,
        ant2,
        station_names=("AA", "AP", "SM"),
        freq=230e9,
    )


def test_image_extent_orientation_and_a_pixel_east_of_centre():
    """East (+x) is on the left: the x axis is inverted, and a bright pixel in
    column 0 (the easternmost, x = +4.5 psize) is drawn left of the centre at
    +22.5 µas, row 0 at the top."""
    img = np.zeros(GRID.shape)
    iy, ix = 0, 0
    img[iy, ix] = 1.0
    ax = em.plot_image(img, GRID, units="Jy/pixel")
    artist = ax.images[0]
    left, right, bottom, top = artist.get_extent()
    assert (left, right, bottom, top) == pytest.approx((25.0, -25.0, -20.0, 20.0))
    assert ax.xaxis_inverted() and not ax.yaxis_inverted()
    # The pixel-centre convention, in µas.
    x_uas = em.rad_to_uas(GRID.x[ix])
    y_uas = em.rad_to_uas(GRID.y[iy])
    assert (x_uas, y_uas) == pytest.approx((22.5, 17.5))
    # Where that coordinate lands on screen, and which pixel is drawn there.
    ax.figure.canvas.draw()
    px, py = ax.transData.transform((x_uas, y_uas))
    cx, cy = ax.transData.transform((0.0, 0.0))
    assert px < cx and py > cy  # left of and above the centre
    # The data value under that data coordinate is the bright pixel.
    col = int((left - x_uas) / (left - right) * GRID.nx)
    row = int((top - y_uas) / (top - bottom) * GRID.ny)
    assert artist.get_array()[row, col] == 1.0
    assert (row, col) == (iy, ix)


def test_colour_bar_units_against_a_hand_computation():
    img = np.full(GRID.shape, 2e-3)  # Jy/pixel
    ax = em.plot_image(img, GRID)  # Jy/µas² by default
    assert np.asarray(ax.images[0].get_array()) == pytest.approx(2e-3 / 25.0)
    assert "Jy / µas²" in ax.figure.axes[-1].get_ylabel()
    # Rayleigh–Jeans, by hand: 2 mJy in a 5 µas pixel at 230 GHz.
    psize = 5.0 * np.pi / 180 / 3600 / 1e6
    intensity = 2e-3 * 1e-26 / psize**2
    tb = intensity * 299792458.0**2 / (2 * 1.380649e-23 * 230e9**2)
    assert tb == pytest.approx(2.0942e9, rel=1e-4)  # about 2e9 K
    ax = em.plot_image(img, GRID, units="Tb", freq=230e9)
    assert np.asarray(ax.images[0].get_array()) == pytest.approx(tb, rel=1e-12)
    assert em.image_in_units(img, GRID, "Tb", 230e9) == pytest.approx(tb, rel=1e-12)
    with pytest.raises(TypeError, match="`freq`"):
        em.plot_image(img, GRID, units="Tb")
    with pytest.raises(ValueError, match="`units`"):
        em.plot_image(img, GRID, units="K")


def test_shared_colour_scale_and_one_colour_bar():
    a = np.zeros(GRID.shape)
    b = np.zeros(GRID.shape)
    a[3, 4], b[2, 2] = 1.0, 4.0
    fig = em.plot_images([a, b], GRID, titles=["a", "b"], units="Jy/pixel")
    panels = fig.axes[:2]
    images = [ax.images[0] for ax in panels]
    assert images[0].norm is images[1].norm
    assert images[0].get_clim() == images[1].get_clim() == (0.0, 4.0)
    assert len(fig.axes) == 3  # two panels and one colour bar
    assert [ax.get_title() for ax in panels] == ["a", "b"]
    model = em.GaussianImage(GRID, flux=1.0, fwhm=em.uas_to_rad(15.0))
    fig = em.plot_images([model, model], ncols=1, beam=(20.0, 10.0, 30.0))
    assert len(fig.axes) == 3 and len(fig.axes[0].patches) == 1


def test_beam_ellipse_in_the_lower_left_corner():
    ax = em.plot_image(np.ones(GRID.shape), GRID, beam=(10.0, 5.0, 0.0))
    (ellipse,) = ax.patches
    x, y = ellipse.center
    assert x > 0 and y < 0  # east (drawn on the left) and south: lower left
    assert (ellipse.width, ellipse.height, ellipse.angle) == (10.0, 5.0, 90.0)
    with pytest.raises(ValueError, match="`beam`"):
        em.plot_image(np.ones(GRID.shape), GRID, beam=(-1.0, 2.0, 0.0))
    ax = em.plot_image(np.ones(GRID.shape), GRID, beam=8)  # a circle, FWHM in µas
    assert (ax.patches[0].width, ax.patches[0].height) == (8.0, 8.0)
    # From a review: the one angle in µas; a FWHM in radians drew nothing visible.
    with pytest.raises(ValueError, match="`beam` is in µas.*rad_to_uas"):
        em.plot_image(np.ones(GRID.shape), GRID, beam=em.uas_to_rad(20.0))


def test_uv_coverage_has_both_conjugate_points():
    data = _data()
    for color_by in ("baseline", "time", None):
        ax = em.plot_uv_coverage(data, color_by=color_by)
        pts = np.concatenate([c.get_offsets() for c in ax.collections])
        u, v = np.asarray(data.u) / 1e9, np.asarray(data.v) / 1e9
        assert len(pts) == 2 * data.n_rows
        for sign in (1, -1):
            for uk, vk in zip(u, v):
                assert (
                    np.min(np.hypot(pts[:, 0] - sign * uk, pts[:, 1] - sign * vk))
                    < 1e-12
                )
    ax = em.plot_uv_coverage(data)
    assert len(ax.get_legend().get_texts()) == 3  # AA-AP, AA-SM, AP-SM
    # From a review: past 10 baselines matplotlib's colour cycle repeated; every
    # baseline of the shipped file (2017-04-10) now has a style of its own.
    many = em.load_uvfits(em.example_uvfits()).scan_average()
    ax = em.plot_uv_coverage(many)
    styles = {
        (tuple(c.get_facecolor()[0]), c.get_paths()[0].vertices.tobytes())
        for c in ax.collections
    }
    assert len(ax.collections) == len(many.baselines()) > 10
    assert len(styles) == len(ax.collections)
    with pytest.raises(ValueError, match="`color_by`"):
        em.plot_uv_coverage(data, color_by="station")


def test_amplitudes_with_model_visibilities_or_an_image():
    data = _data()
    model_vis = 2.0 * np.asarray(data.vis)
    ax = em.plot_amplitudes(data, model_vis)
    (line,) = ax.lines[-1:]
    # The model is drawn above the data's markers (it was hidden under them).
    assert line.get_zorder() > max(x.get_zorder() for x in ax.lines[:-1])
    np.testing.assert_allclose(line.get_ydata(), np.abs(model_vis))
    np.testing.assert_allclose(line.get_xdata(), data.uvdist / 1e9)
    img = np.random.default_rng(1).uniform(size=GRID.shape)
    ax = em.plot_amplitudes(data, img, GRID)
    expected = np.abs(em.DirectFT(GRID, data.u, data.v)(jnp.asarray(img)))
    np.testing.assert_allclose(ax.lines[-1].get_ydata(), expected, rtol=1e-12)
    with pytest.raises(ValueError, match="`model`"):
        em.plot_amplitudes(data, model_vis[:3])
    with pytest.raises(TypeError, match="`grid`"):
        em.plot_amplitudes(data, img)


def test_closure_phase_residuals_are_wrapped_and_normalised():
    truth = em.GaussianImage(
        GRID, flux=1.0, fwhm=em.uas_to_rad(10.0), x0=em.uas_to_rad(4.0)
    )
    data = em.observe(
        truth(),
        GRID,
        em.EHT2017.select(["AA", "AP", "LM", "SM", "PV"]),
        ra=187.7,
        dec=12.4,
        times=np.arange(0.0, 24.0, 2.0),
        seed=1,
    )
    cp = em.closure_phases(data)
    model = np.asarray(cp.cphase) + 0.5 * np.asarray(cp.sigma)
    model[0] = np.asarray(cp.cphase)[0] - 2 * np.pi  # wrapped: residual 0
    res = em.closure_phase_residuals(cp, model)
    assert res[0] == pytest.approx(0.0, abs=1e-9)
    np.testing.assert_allclose(res[1:], -0.5, rtol=1e-9)
    for x in ("time", "uvdist"):
        ax = em.plot_closure_phase_residuals(cp, model, x=x)
        np.testing.assert_allclose(ax.lines[-1].get_ydata(), res)
        # The title counts closure phases (it said "triangles") and gives the RMS.
        rms = np.sqrt(np.mean(res**2))
        assert f"({res.size} closure phases, RMS {rms:.3g})" in ax.get_title()
    ax = em.plot_closure_phase_residuals(cp, truth)  # an image model
    assert np.all(np.isfinite(ax.lines[-1].get_ydata()))
    with pytest.raises(ValueError, match="`x`"):
        em.plot_closure_phase_residuals(cp, model, x="baseline")
    with pytest.raises(ValueError, match="`model`"):
        em.closure_phase_residuals(cp, model[:2])


def test_figures_save_as_png(tmp_path):
    data = _data()
    fig = em.plot_images([np.ones(GRID.shape)] * 3, GRID, ncols=2)
    fig.savefig(tmp_path / "images.png")
    em.plot_uv_coverage(data).figure.savefig(tmp_path / "uv.png")
    em.plot_amplitudes(data).figure.savefig(tmp_path / "amp.png")
    for name in ("images", "uv", "amp"):
        assert (tmp_path / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_plots_draw_on_given_axes_and_never_show(monkeypatch):
    monkeypatch.setattr(plt, "show", lambda *a, **k: pytest.fail("plt.show called"))
    fig, axes = plt.subplots(1, 2)
    assert em.plot_image(np.ones(GRID.shape), GRID, ax=axes[0]) is axes[0]
    assert em.plot_uv_coverage(_data(), ax=axes[1]) is axes[1]
    with pytest.raises(TypeError, match="`ax`"):
        em.plot_image(np.ones(GRID.shape), GRID, ax="left")


@pytest.mark.slow
def test_package_imports_without_matplotlib_and_says_how_to_get_it():
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "import numpy as np, eqmodels as em\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "try:\n"
        "    em.plot_image(np.ones((4, 4)), em.ImageGrid(4, 4, 1e-11))\n"
        "except ImportError as e:\n"
        "    assert 'pip install \"eqmodels[plot]\"' in str(e), e\n"
        "else:\n"
        "    raise SystemExit('no ImportError')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"JAX_PLATFORMS": "cpu", "PATH": ""},
        cwd=str(__import__("pathlib").Path(__file__).parents[1]),
    )
    assert out.returncode == 0, out.stderr


def test_bad_arguments_leave_no_figure_open():
    """Arguments are checked before a figure is made: a failed call must not
    leave figures behind (they pile up in a notebook or a loop)."""
    img = np.ones(GRID.shape)
    plt.close("all")
    bad_calls = [
        lambda: em.plot_image(img, GRID, units="Jy/beam"),
        lambda: em.plot_image(img, GRID, units="Tb"),  # no `freq`
        lambda: em.plot_image(img, GRID, beam=(10.0, -1.0, 0.0)),
        lambda: em.plot_images([img, img], GRID, beam=(10.0, -1.0, 0.0)),
        lambda: em.plot_amplitudes(_data(), np.ones(5) + 0j),
    ]
    for call in bad_calls:
        with pytest.raises((ValueError, TypeError)):
            call()
        assert plt.get_fignums() == [], call


VMIN_AS_STRING = unchecked_error(
    'em.plot_image(np.ones((8, 10)), g, vmin="a")',
    "TypeError",
    "g = em.ImageGrid(8, 10, em.uas_to_rad(5.0))",
)


def test_plot_images_checks_its_own_arguments(unchecked):
    """From a review: these reached matplotlib with messages that named nothing,
    or were read wrongly (a string of titles split into letters, reversed colour
    limits accepted, one Jy/pixel scale over two pixel sizes)."""
    img = np.ones(GRID.shape)
    coarse = em.PixelImage.from_image(
        np.ones(GRID.shape), em.ImageGrid(GRID.ny, GRID.nx, 2 * GRID.psize)
    )
    fine = em.PixelImage.from_image(np.ones(GRID.shape), GRID)
    plt.close("all")
    cases = [
        (dict(images=[img, img], grid=GRID, titles="ab"), TypeError, "`titles`"),
        (dict(images=[img, img], grid=GRID, panel_size=-1.0), ValueError, "panel_size"),
        (dict(images=[img, img], grid=GRID, vmin=1.0, vmax=0.0), ValueError, "vmin"),
        (dict(images=[fine, coarse], units="Jy/pixel"), ValueError, "pixel sizes"),
    ]
    for kw, exc, match in cases:
        with pytest.raises(exc, match=match):
            em.plot_images(**kw)
        assert plt.get_fignums() == []
    with pytest.raises(ValueError, match="`vmin`"):
        em.plot_image(img, GRID, vmin=2.0, vmax=1.0)
    msg = unchecked[VMIN_AS_STRING]
    assert msg is not None and "`vmin` must be a finite number" in msg
    em.plot_images([fine, coarse])  # per area: comparable


def test_masked_images_are_refused_not_drawn_as_they_are():
    img = np.ma.masked_array(np.ones(GRID.shape))
    img[0, 0] = np.ma.masked
    with pytest.raises(TypeError, match="masked array.*filled"):
        em.plot_image(img, GRID)


def test_plot_images_takes_a_numpy_integer_for_ncols():
    img = np.ones(GRID.shape)
    fig = em.plot_images([img, img, img], GRID, ncols=np.int64(2))
    assert len([a for a in fig.axes if a.images]) == 3
    plt.close(fig)


ONE_IMAGE_TO_PLOT_IMAGES = unchecked_error(
    "em.plot_images(np.ones((8, 10)), em.ImageGrid(8, 10, 2e-11))",
    "TypeError",
    "import matplotlib; matplotlib.use('Agg')",
)


def test_zero_d_arrays_as_numbers_and_one_image_to_plot_images(unchecked):
    """From a review: a 0-d array `freq` or `beam` (a JAX or numpy scalar, e.g.
    `data.freq`) was refused as "not a frequency", and one 2-d image given to
    `plot_images` was split into rows ("`images[0]` has shape (10,)")."""
    img = np.ones(GRID.shape)
    ax = em.plot_image(img, GRID, units="Tb", freq=230e9)
    want = ax.images[0].get_array()
    for freq in (jnp.asarray(230e9), np.asarray(230e9)):
        ax = em.plot_image(img, GRID, units="Tb", freq=freq)
        np.testing.assert_array_equal(ax.images[0].get_array(), want)
    em.plot_image(img, GRID, beam=jnp.asarray(10.0))
    plt.close("all")
    # (Under the suite's runtime type checker the annotation refuses it first.)
    msg = unchecked[ONE_IMAGE_TO_PLOT_IMAGES]
    assert msg is not None and "one 2-d image" in msg and "plot_image" in msg, msg
