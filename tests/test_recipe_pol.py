"""The polarimetric M87 recipe (`image_m87_pol`, `eqmodels image --pol`): argument
errors, its steps on small synthetic data, and (slow) the command line and the
full recipe on real data."""

import math

import equinox as eqx
import jax
import numpy as np
import pytest

import eqmodels as em
from eqmodels import _cli, RescaledPolPixels
from eqmodels._recipe import _m87_pol as P


GRID = em.ImageGrid.from_fov(16, 128.0)
SHARED_DAYS = {"05": "095", "06": "096", "10": "100", "11": "101"}


def _ring_stokes(frac=0.1, evpa=0.3, grid=GRID):
    """A polarized ring (0.6 Jy, 40 µas across) on `grid`: uniform fraction and
    EVPA."""
    xx, yy = grid.coords()
    r = np.hypot(xx, yy) / em.uas_to_rad(1.0)
    i = np.exp(-0.5 * ((r - 20.0) / 8.0) ** 2)
    i *= 0.6 / i.sum()
    q = frac * i * np.cos(2 * evpa)
    u = frac * i * np.sin(2 * evpa)
    return np.stack([i, q, u, np.zeros_like(i)])


def _observe(
    stokes, *, freq=227e9, dterms=None, cross=True, seed=0, n_times=6, noise=True,
    grid=GRID,
):  # fmt: skip
    data = em.observe(
        stokes, grid, em.EHT2017, ra=187.7059, dec=12.3911, mjd=57853, freq=freq,
        times=np.linspace(1.0, 6.0, n_times), seed=seed, dterms=dterms, source="M87",
        add_noise=noise,
        mounts={"AP": "nasmyth_r", "AZ": "nasmyth_r", "LM": "nasmyth_l",
                "PV": "nasmyth_l", "SM": "nasmyth_l", "JC": "nasmyth_r"},
    )  # fmt: skip
    if not cross:
        corr = np.array(data.corr)
        corr[:, 2:] = 0.0
        data = data.replace(corr=corr)
    return data


def _pol_data(freq, seed, *, cross=True):
    """A small polarimetric data set built by hand (no transform to compile): four
    stations (ALMA, APEX, LMT, IRAM 30 m) at six timestamps, ALMA-APEX an
    intra-site baseline."""
    rng = np.random.default_rng(seed)
    names = ("AA", "AP", "LM", "PV")
    table = list(em.EHT2017.names)
    xyz = np.asarray(em.EHT2017.xyz)[[table.index(n) for n in names]]
    pairs = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    n_t = 6
    a1 = np.tile([a for a, _ in pairs], n_t)
    a2 = np.tile([b for _, b in pairs], n_t)
    time = np.repeat(np.linspace(1.0, 6.0, n_t), len(pairs))
    intra = (a1 == 0) & (a2 == 1)
    scale = np.where(intra, 1e6, 3e9)
    u = scale * rng.uniform(0.3, 1.0, a1.size)
    v = scale * rng.uniform(-1.0, 1.0, a1.size)
    amp = np.where(intra, 1.2, 0.3)
    phase = np.exp(1j * rng.uniform(-np.pi, np.pi, a1.size))
    rr = amp * phase * (1 + 0.01 * rng.normal(size=a1.size))
    ll = amp * phase * (1 + 0.01 * rng.normal(size=a1.size))
    rl = (0.05 * amp * np.exp(1j * rng.uniform(-np.pi, np.pi, a1.size))) * cross
    lr = (0.05 * amp * np.exp(1j * rng.uniform(-np.pi, np.pi, a1.size))) * cross
    corr = np.stack([rr, ll, rl, lr], axis=1)
    return em.PolVisData(
        u, v, corr, np.full(corr.shape, 0.01), time, a1, a2, station_names=names,
        freq=freq, station_xyz=xyz, source="M87", ra=187.7059, dec=12.3911,
        mjd=57853, mounts=("altaz", "nasmyth_r", "nasmyth_l", "nasmyth_l"),
    )  # fmt: skip


@pytest.fixture(scope="module")
def pair():
    return _ring_stokes(), _pol_data(227e9, 1), _pol_data(229e9, 2)


@pytest.fixture(scope="module")
def prepared(pair):
    """The pair prepared, and its Jones matrices (the stations' field rotation
    computed once: astropy's sidereal time is slow on its first call)."""
    _, lo, hi = pair
    data = P.prepare_pol_data(lo, hi)
    return data, P.pol_jones(data)


@pytest.fixture(scope="module")
def observed():
    stokes = _ring_stokes()
    lo = _observe(stokes, freq=227e9, seed=1)
    hi = _observe(stokes, freq=229e9, seed=2)
    return stokes, lo, hi


# ------------------------------------------------------------------ arguments
def test_image_m87_pol_refuses_bad_arguments(pair):
    _, lo, hi = pair
    with pytest.raises(TypeError, match="`lo` must be a uvfits path or a PolVisData"):
        em.image_m87_pol(lo.stokes_i(), hi)
    with pytest.raises(TypeError, match="`hi` must be a uvfits path"):
        em.image_m87_pol(lo, 3)
    with pytest.raises(TypeError, match="stokes_v"):
        em.image_m87_pol(lo, hi, stokes_v="yes")
    with pytest.raises(TypeError, match="fast"):
        em.image_m87_pol(lo, hi, fast=1)
    with pytest.raises(ValueError, match="`forward` must be"):
        em.image_m87_pol(lo, hi, forward="fft")


@pytest.mark.parametrize(
    "rounds, message",
    [
        ({"m": 1.0}, "`pol_rounds` must be a non-empty list of dicts"),
        ([], "`pol_rounds` must be a non-empty list of dicts"),
        ([3.0], r"`pol_rounds\[0\]` must be a dict"),
        ([{"m": 1.0, "tv": 1.0}], r"unknown key\(s\) \['tv'\]"),
        ([{"m": "1"}], r"`pol_rounds\[0\]\['m'\]` must be a number"),
        ([{"m": 1.0, "hw": -1.0}], r"\['hw'\]` must be finite and >= 0"),
        ([{"m": 1.0}, {"hw": 1.0, "ptv": 3.0}], r"`pol_rounds\[1\]` has no data term"),
        ([{"m": 0.0, "hw": 1.0}], r"`pol_rounds\[0\]` has no data term"),
        ([{"m": 1.0, "dterms": "yes"}], "dterms"),
    ],
)
def test_image_m87_pol_refuses_bad_rounds(pair, rounds, message):
    """Refused before the Stokes I recipe runs (it would take minutes)."""
    _, lo, hi = pair
    with pytest.raises(ValueError if "dterms" not in message else TypeError,
                       match=message):  # fmt: skip
        em.image_m87_pol(lo, hi, pol_rounds=rounds)


@pytest.mark.parametrize("mask", [-0.1, 1.0, float("nan")])
def test_image_m87_pol_refuses_bad_mask(pair, mask):
    _, lo, hi = pair
    with pytest.raises(ValueError, match="`pol_mask` must be a fraction"):
        em.image_m87_pol(lo, hi, pol_mask=mask)
    # Not a number: refused by the type check (the tests run jaxtyping's) or by
    # the recipe's own check, naming the argument either way.
    with pytest.raises((TypeError, ValueError), match="pol_mask"):
        em.image_m87_pol(lo, hi, pol_mask="0.1")


@pytest.mark.parametrize("iterations", [0, -3, 2.5, True, "10"])
def test_image_m87_pol_refuses_bad_iterations(pair, iterations):
    """Refused before the Stokes I recipe runs, by the recipe's check or the type
    check (the tests run jaxtyping's), naming the argument either way."""
    _, lo, hi = pair
    with pytest.raises((TypeError, ValueError), match="pol_iterations"):
        em.image_m87_pol(lo, hi, pol_iterations=iterations)
    with pytest.raises(ValueError, match="`pol_iterations` must be a positive"):
        P.check_pol_iterations(iterations)


def test_check_pol_iterations_accepts_positive_integers(pair, monkeypatch):
    assert P.check_pol_iterations(None) is None
    assert P.check_pol_iterations(1) == 1
    got = P.check_pol_iterations(np.int64(5))
    assert got == 5 and type(got) is int

    # Refused before the Stokes I recipe runs (it would take minutes).
    def stokes_i_recipe(*args, **kwargs):
        raise AssertionError("the Stokes I recipe ran before the check")

    monkeypatch.setattr(P, "image_m87", stokes_i_recipe)
    _, lo, hi = pair
    with pytest.raises(ValueError, match="`pol_iterations` must be a positive"):
        em.image_m87_pol(lo, hi, pol_iterations=0)


@pytest.mark.parametrize("tol", [0, 0.0, 1, 1.5, -1e-8, float("nan"), True, "1e-8"])
def test_image_m87_pol_refuses_bad_tol(pair, monkeypatch, tol):
    """Refused before the Stokes I recipe runs, by the recipe's check or the type
    check (the tests run jaxtyping's), naming the argument either way."""

    def stokes_i_recipe(*args, **kwargs):
        raise AssertionError("the Stokes I recipe ran before the check")

    monkeypatch.setattr(P, "image_m87", stokes_i_recipe)
    _, lo, hi = pair
    with pytest.raises((TypeError, ValueError), match="pol_tol"):
        em.image_m87_pol(lo, hi, pol_tol=tol)
    with pytest.raises(ValueError, match="`pol_tol` must be a number in \\(0, 1\\)"):
        P.check_pol_tol(tol)


@pytest.mark.parametrize("power", [-1, -0.5, float("nan"), float("inf"), True, "1"])
def test_image_m87_pol_refuses_bad_scale_power(pair, monkeypatch, power):
    """Refused before the Stokes I recipe runs, by the recipe's check or the type
    check (the tests run jaxtyping's), naming the argument either way."""

    def stokes_i_recipe(*args, **kwargs):
        raise AssertionError("the Stokes I recipe ran before the check")

    monkeypatch.setattr(P, "image_m87", stokes_i_recipe)
    stokes, lo, hi = pair
    with pytest.raises((TypeError, ValueError), match="pol_scale_power"):
        em.image_m87_pol(lo, hi, pol_scale_power=power)
    with pytest.raises((TypeError, ValueError), match="pol_scale_power_v"):
        em.image_m87_pol(lo, hi, stokes_v=True, pol_scale_power_v=power)
    with pytest.raises((TypeError, ValueError), match="scale_power"):
        P.image_polarization(
            P.prepare_pol_data(lo, hi), stokes[0], GRID, scale_power=power
        )


def test_image_m87_pol_solves_in_the_scaled_coordinates(pair, monkeypatch):
    """The rounds solve for `z` of `RescaledPolPixels` with the recipe's power
    (or `pol_scale_power`), and the recipe returns the `PolPixelImage`."""
    stokes, lo, hi = pair
    monkeypatch.setattr(P, "image_m87", lambda *a, **k: (stokes[0], {"grid": GRID}))
    monkeypatch.setattr(P, "selfcal_pol", lambda data, image, grid: data)
    seen, real_solve = [], P.solve

    def spy(objective, model, *args, **kwargs):
        image, _ = model
        assert isinstance(image, RescaledPolPixels)
        params, _ = eqx.partition(model, kwargs["params"])
        assert jax.tree.leaves(params[0]) == [image.z]
        seen.append(np.asarray(image.scale))
        return real_solve(objective, model, *args, **kwargs)

    monkeypatch.setattr(P, "solve", spy)
    kw = dict(pol_iterations=2, forward="direct")
    em.image_m87_pol(lo, hi, **kw)
    i = stokes[0].reshape(-1)[
        stokes[0].reshape(-1) > P.POL_MASK_FRACTION * stokes[0].max()
    ]
    want = (i / i.max()) ** (-P.POL_SCALE_POWER)
    assert len(seen) == len(P.POL_ROUNDS)
    for scale in seen:
        for row in scale:
            np.testing.assert_allclose(row, want, rtol=1e-12)
    seen.clear()
    em.image_m87_pol(lo, hi, stokes_v=True, **kw)  # V: its own exponent
    assert len(seen) == len(P.POL_ROUNDS)
    for scale in seen:
        np.testing.assert_allclose(scale[0], want, rtol=1e-12)
        np.testing.assert_allclose(scale[1], want, rtol=1e-12)
        want_v = (i / i.max()) ** (-P.POL_SCALE_POWER_V)
        np.testing.assert_allclose(scale[2], want_v, rtol=1e-12)
    seen.clear()
    # Given: Q, U's exponent alone (V keeps its default), and V's with stokes_v.
    em.image_m87_pol(lo, hi, stokes_v=True, pol_scale_power=0.5, **kw)
    em.image_m87_pol(lo, hi, stokes_v=True, pol_scale_power_v=0.5, **kw)
    assert len(seen) == 2 * len(P.POL_ROUNDS)
    half = (i / i.max()) ** -0.5
    for k, scale in enumerate(seen):
        qu, v = (half, want_v) if k < len(P.POL_ROUNDS) else (want, half)
        np.testing.assert_allclose(scale[0], qu, rtol=1e-12)
        np.testing.assert_allclose(scale[2], v, rtol=1e-12)
    seen.clear()
    em.image_m87_pol(lo, hi, pol_scale_power=0, **kw)
    assert len(seen) == len(P.POL_ROUNDS)
    assert all(np.all(scale == 1.0) for scale in seen)
    with pytest.raises(ValueError, match="`pol_scale_power_v` is the exponent"):
        em.image_m87_pol(lo, hi, pol_scale_power_v=0.5, **kw)
    with pytest.raises(ValueError, match="`scale_power_v` is the exponent"):
        P.image_polarization(
            P.prepare_pol_data(lo, hi), stokes[0], GRID, scale_power_v=0.5
        )
    model, *_ = P.image_polarization(
        P.prepare_pol_data(lo, hi), stokes[0], GRID, iterations=2, forward="direct"
    )
    assert type(model) is em.PolPixelImage


def test_check_pol_tol_accepts_numbers_in_the_open_unit_interval():
    assert P.check_pol_tol(None) is None
    assert P.check_pol_tol(1e-8) == 1e-8
    got = P.check_pol_tol(np.float32(0.5))
    assert got == 0.5 and type(got) is float


def test_image_m87_pol_passes_pol_tol_on(pair, monkeypatch):
    """`pol_tol` becomes every round's `ftol` and `gtol`; without it, `POL_STOP`."""
    stokes, lo, hi = pair
    monkeypatch.setattr(P, "image_m87", lambda *a, **k: (stokes[0], {"grid": GRID}))
    monkeypatch.setattr(P, "selfcal_pol", lambda data, image, grid: data)
    seen, real_solve = [], P.solve

    def spy(*args, **kwargs):
        seen.append((kwargs["ftol"], kwargs["gtol"]))
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(P, "solve", spy)
    kw = dict(pol_iterations=2, forward="direct")
    em.image_m87_pol(lo, hi, pol_tol=1e-3, **kw)
    assert seen == [(1e-3, 1e-3)] * len(P.POL_ROUNDS)
    seen.clear()
    em.image_m87_pol(lo, hi, pol_tol=np.float32(0.5), **kw)  # a NumPy scalar
    assert seen == [(0.5, 0.5)] * len(P.POL_ROUNDS)
    seen.clear()
    em.image_m87_pol(lo, hi, **kw)
    assert seen == [(P.POL_STOP, P.POL_STOP)] * len(P.POL_ROUNDS)
    with pytest.raises(ValueError, match="`tol` must be a number in"):
        P.image_polarization(P.prepare_pol_data(lo, hi), stokes[0], GRID, tol=2.0)


def test_image_m87_pol_passes_pol_iterations_on(pair, monkeypatch):
    """`pol_iterations` reaches the polarimetric rounds (the Stokes I recipe and
    the self-calibration replaced by the true image, to keep it fast)."""
    stokes, lo, hi = pair
    monkeypatch.setattr(P, "image_m87", lambda *a, **k: (stokes[0], {"grid": GRID}))
    monkeypatch.setattr(P, "selfcal_pol", lambda data, image, grid: data)
    out, report = em.image_m87_pol(lo, hi, pol_iterations=3, forward="direct")
    assert [e["steps"] for e in report["rounds"]] == [3] * len(P.POL_ROUNDS)
    # β₂ about the ring: the ring found in the Stokes I image, the annulus about it.
    ring = report["ring"]
    assert ring == em.ring_center(
        stokes[0], GRID, r_min=em.uas_to_rad(10.0), r_max=em.uas_to_rad(35.0)
    )
    w = em.uas_to_rad(P.RING_ANNULUS_UAS)
    blurred = np.stack(
        [np.asarray(em.blur_image(p, GRID, em.uas_to_rad(20.0))) for p in out]
    )
    want = em.beta_m(blurred, GRID, 2, x0=ring["x0"], y0=ring["y0"],
                     r_min=ring["radius"] - w, r_max=ring["radius"] + w)  # fmt: skip
    got = report["summary_20uas_ring"]["beta2"]
    np.testing.assert_allclose(got, complex(want), rtol=1e-12)
    with pytest.raises(ValueError, match="`iterations` must be a positive"):
        P.image_polarization(report["data"], stokes[0], GRID, iterations=0)


def test_image_polarization_iterations_bound_each_round(observed):
    """`iterations` caps the L-BFGS steps of every round (and replaces `fast`'s)."""
    stokes, lo, hi = observed
    data = P.prepare_pol_data(lo, hi)
    data = data.take(np.flatnonzero(np.hypot(data.u, data.v) >= P.POL_UV_MIN))
    _, _, _, rounds = P.image_polarization(
        data, stokes[0], GRID, fast=True, forward="direct", iterations=3
    )
    assert len(rounds) == len(P.POL_ROUNDS)
    assert all(e["steps"] == 3 and e["reason"] == "max_steps" for e in rounds)


def test_check_pol_rounds_keeps_the_weights():
    assert P.check_pol_rounds(None) == P.POL_ROUNDS
    got = P.check_pol_rounds([{"m": 2, "hw": 0.0, "ptv": 5.0, "dterms": True}])
    # A zero weight leaves its term out; numbers become floats.
    assert got == ({"m": 2.0, "ptv": 5.0, "dterms": True},)


def test_image_m87_pol_refuses_data_without_cross_hands(pair):
    _, lo, _ = pair
    stokes_i_only = _pol_data(229e9, 3, cross=False)
    with pytest.raises(ValueError, match="`hi` has no cross-hand data"):
        em.image_m87_pol(lo, stokes_i_only)


def test_prepare_refuses_two_days(pair):
    _, lo, hi = pair
    other = hi.replace(mjd=hi.mjd + 1)
    with pytest.raises(ValueError, match="different days"):
        P.prepare_pol_data(lo, other)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["image", "--stokes-v"], "--stokes-v needs --pol"),
        (["image", "--pol", "a.uvfits"], "--pol takes one day's two bands"),
        (["image", "--pol", "a", "b", "c", "-o", "x.fits"], "got 3 file"),
        (
            ["image", "--pol", "--png", "p.png", "--tb"],
            "--tb is not offered with --pol",
        ),
    ],
)
def test_cli_pol_argument_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        _cli.main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_pol_defaults_to_the_shipped_pair(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = _cli._parser().parse_args(["image", "--pol"])
    _cli._check_pol(args.parser, args)
    assert args.uvfits == [
        str(em.example_uvfits("m87_2017_04_10_pol_lo")),
        str(em.example_uvfits("m87_2017_04_10_pol_hi")),
    ]
    assert args.output == "m87_pol.fits"
    _cli._check_paths(args.parser, args)  # the shipped files exist


def test_cli_pol_writes_the_four_planes_and_the_numbers(tmp_path, monkeypatch, capsys):
    """The command line around `image_m87_pol` (replaced by a stand-in returning a
    known image): its settings passed on, the FITS cube written, the papers'
    numbers and the D-terms printed."""
    stokes = _ring_stokes()
    calls = {}

    def fake(*files, **kwargs):
        calls["files"], calls["kwargs"] = files, kwargs
        summary = em.polarization_summary(stokes, GRID)
        report = {
            "grid": GRID,
            "stokes_i": {"data": None},
            "summary": summary,
            "summary_20uas": summary,
            "ring": {"x0": 1e-11, "y0": -2e-11, "radius": 1e-10, "radius_std": 0.0},
            "summary_20uas_ring": {"beta2_abs": 0.0512, "beta2_arg_deg": -140.25},
            "fitted": ["LM"],
            "dterms": {"AA": {"lo": (0j, 0j)}, "LM": {"lo": (0.05 + 0.01j, -0.02j)}},
        }
        return stokes, report

    monkeypatch.setattr(em, "image_m87_pol", fake)
    out = tmp_path / "pol.fits"
    argv = ["image", "--pol", "--stokes-v", "--fast", "--no-cache"]
    argv += ["--prior-fwhm", "30", "--zbl", "0.5", "-o", str(out)]
    assert _cli.main(argv) == 0
    text = capsys.readouterr().out
    assert calls["files"] == (
        str(em.example_uvfits("m87_2017_04_10_pol_lo")),
        str(em.example_uvfits("m87_2017_04_10_pol_hi")),
    )
    kw = calls["kwargs"]
    assert kw["stokes_v"] and kw["fast"] and kw["zbl"] == 0.5
    assert kw["prior_fwhm"] == 30.0
    back, grid = em.load_fits(out)
    np.testing.assert_allclose(np.asarray(back), stokes, rtol=1e-6, atol=1e-12)
    assert grid.shape == GRID.shape
    m_net = abs(stokes[1].sum() + 1j * stokes[2].sum()) / stokes[0].sum()
    assert f"|m_net| {m_net:.4f}" in text
    assert "LM: lo +0.050+0.010i -0.000-0.020i" in text
    assert "β2 about the ring's centre (+2.1, -4.1) µas, radius 20.6 µas" in text
    assert "|β2| 0.0512  ∠β2 -140.2°" in text


def test_cli_pol_png_draws_the_polarization_picture(tmp_path, monkeypatch, capsys):
    """`--pol --png`: the picture of the four planes (EVPA ticks over Stokes I,
    through `plot_polarization`), restored with `--restore-beam`, titled with the
    date and bands; the FITS keeps the unrestored image."""
    pytest.importorskip("matplotlib")
    stokes = _ring_stokes()
    data = em.load_uvfits(
        em.example_uvfits("m87_2017_04_10_pol_lo"), polarization="full"
    )
    drawn = {}

    def fake(*files, **kwargs):
        summary = em.polarization_summary(stokes, GRID)
        report = {
            "grid": GRID, "data": data, "stokes_i": {"data": None},
            "summary": summary, "summary_20uas": summary, "fitted": [], "dterms": {},
        }  # fmt: skip
        return stokes, report

    def spy(image, grid, path, **kwargs):
        drawn.update(image=np.asarray(image), path=path, **kwargs)
        real(image, grid, path, **kwargs)

    real = _cli.plot_image
    monkeypatch.setattr(em, "image_m87_pol", fake)
    monkeypatch.setattr(_cli, "plot_image", spy)
    out, png = tmp_path / "pol.fits", tmp_path / "pol.png"
    argv = ["image", "--pol", "--no-cache", "-o", str(out), "--png", str(png)]
    assert _cli.main(argv + ["--restore-beam=20"]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn["image"].shape == (4, *GRID.shape)
    assert drawn["beam"] == 20.0 and "2017-04-10" in drawn["title"]
    # Each plane restored with the 20 µas beam; the FITS holds the image as imaged.
    for k in range(4):
        want = np.asarray(em.blur_image(stokes[k], GRID, em.uas_to_rad(20.0)))
        np.testing.assert_allclose(drawn["image"][k], want, rtol=1e-12, atol=1e-15)
    back, _ = em.load_fits(out)
    np.testing.assert_allclose(back, stokes, rtol=1e-12, atol=1e-15)
    assert f"wrote {png}" in capsys.readouterr().out


# ------------------------------------------------------------------ the steps
def test_prepare_pol_data_scales_intra_site_rows_and_shifts_bands(pair):
    _, lo, hi = pair
    data = P.prepare_pol_data(hi, lo, zbl=0.5)  # either order: lo is band 0
    assert data.band_freqs == (227e9, 229e9)
    both = em.concatenate([lo.scan_average(), hi.scan_average()])
    assert data.n_rows == both.n_rows
    band = np.asarray(data.band)
    np.testing.assert_allclose(
        np.asarray(data.time), np.asarray(both.time) + 1e-5 * band, rtol=0, atol=1e-12
    )
    uv = np.hypot(np.asarray(both.u), np.asarray(both.v))
    short = uv < 0.1e9
    assert short.any() and (~short).any()
    names = both.station_names
    a1, a2 = np.asarray(both.ant1), np.asarray(both.ant2)
    aa_ap = ((a1 == names.index("AA")) & (a2 == names.index("AP"))) | (
        (a1 == names.index("AP")) & (a2 == names.index("AA"))
    )
    i_short = np.abs(0.5 * (np.asarray(both.corr)[:, 0] + np.asarray(both.corr)[:, 1]))
    factor = 0.5 / np.median(i_short[aa_ap])
    expect = np.where(short, factor, 1.0)[:, None] * np.asarray(both.corr)
    np.testing.assert_allclose(np.asarray(data.corr), expect, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(data.sigma),
        np.where(short, factor, 1.0)[:, None] * np.asarray(both.sigma),
        rtol=1e-12,
    )


def test_pol_jones_has_one_dterm_set_per_band(prepared):
    data, jones = prepared
    assert jones.field_rotation_corrected
    assert jones.n_dterm_intervals == 2 and jones.n_intervals == 1
    ti, band = np.asarray(data.time_index), np.asarray(data.band)
    np.testing.assert_array_equal(np.asarray(jones.slot_dterm)[ti], band)
    # The field rotation is the data's, per time slot and station.
    ref = em.StationJones.from_data(data, field_rotation_corrected=True)
    np.testing.assert_allclose(
        np.asarray(jones.rotation), np.asarray(ref.rotation), atol=1e-12
    )


def test_station_dterm_prior_matches_numpy(pair):
    """`DTermPrior` with a σ per station (the recipe's use), compiled."""
    _, lo, _ = pair
    rng = np.random.default_rng(0)
    names = lo.station_names
    d = rng.normal(size=(1, len(names), 2)) + 1j * rng.normal(size=(1, len(names), 2))
    jones = em.StationJones.from_data(
        lo, "track", "track", dterms=0.05 * d, field_rotation=np.zeros((lo.n_rows, 2))
    )
    sigma = np.full(len(names), 0.1)
    own = {names[0]: 0.01, names[2]: 0.3}
    for name, value in own.items():
        sigma[names.index(name)] = value
    value, g = eqx.filter_jit(
        eqx.filter_value_and_grad(lambda j: em.DTermPrior(j, 0.1, station_sigma=own)())
    )(jones)
    expect = np.sum(np.abs(0.05 * d) ** 2 / sigma[None, :, None] ** 2)
    np.testing.assert_allclose(float(value), expect, rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(g.d_real),
        2 * (0.05 * d.real) / sigma[None, :, None] ** 2,
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        np.asarray(g.d_imag),
        2 * (0.05 * d.imag) / sigma[None, :, None] ** 2,
        rtol=1e-12,
    )
    # math.inf frees a station: its D-terms leave the sum.
    free = em.DTermPrior(jones, 0.1, station_sigma={names[0]: math.inf})()
    keep = np.ones(len(names), bool)
    keep[0] = False
    expect = np.sum(np.abs(0.05 * d[:, keep]) ** 2) / 0.1**2
    np.testing.assert_allclose(float(free), expect, rtol=1e-12)


def test_round_objectives_hold_the_recipe_terms(prepared):
    data, jones = prepared
    names = []
    for stokes_v in (False, True):
        for weights in P.POL_ROUNDS:
            obj = P.pol_round_objective(
                data, GRID, jones, weights, stokes_v=stokes_v, forward="direct",
            )  # fmt: skip
            names.append(set(obj.names))
            expect = {k for k in weights if k != "dterms"} | {"dterm"}
            if stokes_v:
                expect |= set(P.STOKES_V_TERMS)
            assert set(obj.names) == expect
            w = dict(zip(obj.names, np.asarray(obj.weights)))
            first = obj.objective.terms[0]
            assert first.report_name == "m"
            np.testing.assert_allclose(
                w["dterm"], weights["m"] / (2 * int(first.n_rows)), rtol=1e-15
            )
    assert "pvis" not in names[0] and "pvis" in names[2]


def test_round_stokes_v_weights_replace_the_defaults(prepared):
    data, jones = prepared
    (weights,) = P.check_pol_rounds(
        [{"m": 5.0, "hw": 1.0, "vvis": 2.0, "l1v": 0.0}], stokes_v=True
    )
    assert weights["l1v"] == 0.0  # kept: a zero V weight leaves its term out
    obj = P.pol_round_objective(
        data, GRID, jones, weights, stokes_v=True, forward="direct"
    )
    w = dict(zip(obj.names, np.asarray(obj.weights)))
    assert "l1v" not in w  # zero: left out
    assert w["vvis"] == 2.0  # given
    assert w["vtv"] == P.STOKES_V_TERMS["vtv"]  # not given: the default
    with pytest.raises(ValueError, match=r"need `stokes_v=True`"):
        P.check_pol_rounds([{"m": 5.0, "vvis": 2.0}])


def test_filters_free_polarization_and_dterms_only(prepared):
    _, jones = prepared
    intensity = em.PixelImage.from_prior(_ring_stokes()[0], GRID, clipfloor=1e-6)
    image = em.PolPixelImage.init(intensity, frac=0.05, circular=False)
    model = RescaledPolPixels(image, P.POL_SCALE_POWER)
    for dterms in (False, True):
        f_image, f_jones = P._filters(model, jones, dterms)
        assert f_image.z is True and f_image.scale is False
        assert not any(x is True for x in jax.tree.leaves(f_image.image))
        assert (f_jones.d_real is True) == dterms and (f_jones.d_imag is True) == dterms
        assert f_jones.log_amp is False and f_jones.phase is False


@pytest.mark.slow
def test_selfcal_pol_keeps_fractional_polarization(observed):
    stokes, lo, hi = observed
    data = P.prepare_pol_data(lo, hi)
    # Corrupt with one gain per station and row (the same for R and L).
    rng = np.random.default_rng(3)
    n_st = len(data.station_names)
    g = (1 + 0.1 * rng.normal(size=n_st)) * np.exp(1j * rng.uniform(-1, 1, n_st))
    f = g[np.asarray(data.ant1)] * np.conj(g[np.asarray(data.ant2)])
    bad = data.replace(corr=np.asarray(data.corr) * f[:, None])
    fixed = P.selfcal_pol(bad, stokes[0], GRID)
    before, _ = bad.stokes()
    after, _ = fixed.stokes()
    np.testing.assert_allclose(
        after[:, 1:3] / after[:, :1], before[:, 1:3] / before[:, :1], rtol=1e-9
    )
    # Closer to the model's Stokes I than before.
    term = em.VisChi2.from_data(data.stokes_i(), GRID, forward="direct")
    model = np.asarray(term.forward(jax.numpy.asarray(stokes[0])))
    assert (
        np.abs(after[:, 0] - model).mean() < 0.5 * np.abs(before[:, 0] - model).mean()
    )


def _shipped_coverage():
    """The shipped 2017-04-10 pair prepared as the recipe prepares it, without
    the intra-site baselines: a real night's rows, times, stations and σ."""
    import pathlib

    base = pathlib.Path(em.__file__).parent / "data"
    lo, hi = (
        em.load_uvfits(
            base / f"SR2_M87_2017_100_{b}_hops_zbl-dtcal+selfcal.uvfits",
            polarization="full",
        )
        for b in ("lo", "hi")
    )
    data = P.prepare_pol_data(lo, hi)
    return data.take(np.flatnonzero(np.hypot(data.u, data.v) >= P.POL_UV_MIN))


@pytest.mark.slow
def test_polarimetric_rounds_recover_synthetic_leakage():
    """The polarimetric stage on synthetic data with a known leakage of 3-6 % at
    the LMT and the IRAM 30 m, observed (`observe_same`) with the coverage and σ of
    the shipped 2017-04-10 pair: the fitted D-terms approach it, the corrected
    stations' stay at 0, and the image's net polarization approaches the truth."""
    grid = em.ImageGrid.from_fov(64, 128.0)  # the recipe's (its weights are for it)
    stokes = _ring_stokes(frac=0.1, evpa=0.3, grid=grid)
    leak = {"LM": (0.05 + 0.02j, -0.03 + 0.04j), "PV": (-0.04j, 0.03)}
    # Noise-free (the σ are the night's): what is left is the recipe's own bias
    # (regularizers, priors) and the data's degeneracies, not noise.
    data = em.observe_same(
        stokes, grid, _shipped_coverage(), dterms=leak, add_noise=False
    )
    model, jones, start, rounds = P.image_polarization(
        data, stokes[0], grid, forward="direct"
    )
    for e in rounds:
        assert e["end"] <= e["start"] + 1e-9
        assert e["reason"] != "max_steps"  # each round runs to convergence
    assert rounds[-1]["terms"]["m"] < start["terms"]["m"]
    d = np.asarray(jones.dterms())
    names = data.station_names
    err, true = [], []
    for s, (dr, dl) in leak.items():
        j = names.index(s)
        err.append(d[:, j] - np.array([dr, dl])[None])
        true.append(np.broadcast_to(np.array([dr, dl]), d[:, j].shape))
    rms = lambda x: np.sqrt(np.mean(np.abs(np.asarray(x)) ** 2))  # noqa: E731
    # Measured (hw 100, ptv 3, rescaled coordinates, 1e-8): rms error 0.12 of the
    # leakage's rms, largest 0.0070 (ptv 10 in the old coordinates: 0.13,
    # 0.0073); hw 300, ptv 30 at 1e-6: 0.33, 0.018; 200
    # steps a round with ptv 100: 0.33, 0.020; the weights before the survey (hw
    # 1, ptv 100, 200 steps): 0.27, 0.021.
    assert rms(err) < 0.5 * rms(true)
    assert np.abs(np.asarray(err)).max() < 0.03
    for s in P.ZBL_CORRECTED_STATIONS:
        if s in names:
            assert np.abs(d[:, names.index(s)]).max() < 1e-3
    out = np.asarray(model())
    m_net = abs(out[1].sum() + 1j * out[2].sum()) / out[0].sum()
    # Biased low (8.8 % now, and in the old coordinates; 7.4 % with hw 300, ptv 30
    # at 1e-6, 7.6 % at 200 steps
    # a round with ptv 100, 9.6 % with the weights before the survey): hw and ptv
    # favour less polarization, and part of a uniform polarization can hide in the
    # D-terms (docs/recipe.md).
    assert 0.07 < m_net < 0.12
    assert np.all(np.sqrt((out[1:] ** 2).sum(0)) <= out[0] * (1 + 1e-12))


@pytest.mark.slow
def test_scaled_coordinates_settle_the_rounds():
    """The same objective solved in the recipe's coordinates (`RescaledPolPixels`,
    power 1) and in the `PolPixelImage`'s own (power 0), each round to `POL_STOP`,
    on the leakage test's data: the scaled rounds end lower in fewer steps. (On
    2017-04-11 the unscaled rounds' |m_net| drifted with the tolerance, docs/recipe.md
    "Where the rounds stop".)"""
    grid = em.ImageGrid.from_fov(64, 128.0)
    stokes = _ring_stokes(frac=0.1, evpa=0.3, grid=grid)
    leak = {"LM": (0.05 + 0.02j, -0.03 + 0.04j), "PV": (-0.04j, 0.03)}
    data = em.observe_same(
        stokes, grid, _shipped_coverage(), dterms=leak, add_noise=False
    )
    runs = {}
    for power in (0.0, P.POL_SCALE_POWER):
        model, jones, start, rounds = P.image_polarization(
            data, stokes[0], grid, forward="direct", scale_power=power
        )
        assert all(e["reason"] != "max_steps" for e in rounds)
        final = P.pol_round_objective(data, grid, jones, P.POL_ROUNDS[-1])
        runs[power] = (
            float(final((model, jones))),
            sum(e["steps"] for e in rounds),
        )
    (f0, steps0), (f1, steps1) = runs[0.0], runs[P.POL_SCALE_POWER]
    # Measured: objective −51.159 in 857 steps (the old coordinates: −51.114 in
    # 1 732).
    assert f1 <= f0 + 1e-9 * abs(f0)
    assert steps1 < steps0


@pytest.mark.slow
def test_polarimetric_rounds_with_stokes_v():
    """`stokes_v`: the V terms in every round, V imaged with the right sign at
    `fast`'s 50 steps a round. On these data (V = 10 % of I, about 1σ per row) the
    V regularizers keep it well below the truth: the test asks for the sign and
    physical planes. (Run to convergence the net V comes out −0.15 %, the wrong
    sign: docs/recipe.md, "Stokes V is the least tested part".)"""
    stokes = _ring_stokes(frac=0.1, evpa=0.3)
    stokes[3] = 0.1 * stokes[0]
    lo, hi = (_observe(stokes, freq=f, n_times=8, noise=False) for f in (227e9, 229e9))
    data = P.prepare_pol_data(lo, hi)
    data = data.take(np.flatnonzero(np.hypot(data.u, data.v) >= P.POL_UV_MIN))
    model, _, start, rounds = P.image_polarization(
        data, stokes[0], GRID, stokes_v=True, fast=True, forward="direct"
    )
    assert {"vvis", "l1v", "vtv"} <= set(start["terms"])
    for e in rounds:
        assert e["end"] <= e["start"] + 1e-9
    assert rounds[-1]["terms"]["vvis"] < start["terms"]["vvis"]
    out = np.asarray(model())
    assert np.all(np.isfinite(out))
    assert np.all(np.sqrt((out[1:] ** 2).sum(0)) <= out[0] * (1 + 1e-12))
    v_net = out[3].sum() / out[0].sum()
    # Measured: +0.69 % (V in its own coordinates, `POL_SCALE_POWER_V` 0).
    assert 0.005 < v_net < 0.12


# ------------------------------------------------------------------ slow
def _parse_rounds(text):
    rows = []
    for line in text.splitlines():
        if line.startswith("pol round"):
            obj = line.split("objective ")[1].split()
            chi2 = line.split("χ² m ")[1].split()[0]
            rows.append((float(obj[0]), float(obj[2]), float(chi2)))
        if line.startswith("pol start"):
            start_m = float(line.split("χ² m ")[1].split()[0])
    return start_m, rows


@pytest.mark.slow
def test_cli_pol_fast_on_the_shipped_pair(tmp_path, capsys):
    out = tmp_path / "m87_pol.fits"
    png = tmp_path / "m87_pol.png"
    argv = ["image", "--pol", "--fast", "--no-cache", "-o", str(out), "--png", str(png)]
    rc = _cli.main(argv)
    text = capsys.readouterr().out
    assert rc == 0, text
    assert png.is_file() and png.stat().st_size > 0
    stokes, grid = em.load_fits(out)
    stokes = np.asarray(stokes)
    assert stokes.shape == (4, 64, 64)
    assert np.all(np.isfinite(stokes))
    i, p = stokes[0], np.sqrt((stokes[1:] ** 2).sum(0))
    assert np.all(i >= 0) and np.all(p <= i * (1 + 1e-9) + 1e-15)
    assert abs(i.sum() - 0.6) < 0.03  # the Stokes I recipe's compact flux
    assert np.any(p > 0)
    start_m, rows = _parse_rounds(text)
    assert len(rows) == len(P.POL_ROUNDS)
    for before, after, _ in rows:
        assert after <= before + 1e-9  # each round lowers its objective
    assert rows[-1][2] < start_m  # the fit to m improved overall
    assert "|m_net|" in text and "∠β2" in text
    for station in ("AZ", "LM", "PV"):
        assert f"  {station}: lo " in text


@pytest.mark.slow
def test_full_recipe_on_real_data(shared_data):
    base = shared_data / "eht" / "m87_2017_pol" / "hops_data" / "April10"
    lo = base / "SR2_M87_2017_100_lo_hops_zbl-dtcal+selfcal.uvfits"
    hi = base / "SR2_M87_2017_100_hi_hops_zbl-dtcal+selfcal.uvfits"
    if not lo.is_file():
        pytest.skip("the 2017 M87 polarimetric release is not in ../shared")
    stokes, report = em.image_m87_pol(lo, hi)
    assert stokes.shape == (4, 64, 64) and np.all(np.isfinite(stokes))
    np.testing.assert_array_equal(stokes[3], 0.0)  # no Stokes V asked for
    assert np.all(np.hypot(stokes[1], stokes[2]) <= stokes[0] * (1 + 1e-9) + 1e-15)
    assert report["fitted"] == ["AZ", "LM", "PV"]
    for s, bands in report["dterms"].items():
        for dr, dl in bands.values():
            bound = 0.3 if s in report["fitted"] else 1e-2
            assert abs(dr) < bound and abs(dl) < bound, (s, bands)
    rounds = report["rounds"]
    assert rounds[-1]["terms"]["m"] < report["start"]["terms"]["m"]
    # Each round converged (`POL_STOP`), well before the step limit.
    assert all(e["reason"] != "max_steps" for e in rounds)
    assert max(e["steps"] for e in rounds) < P.POL_ITERATIONS // 2
    assert rounds[-1]["terms"]["pvis"] < 10.0
    s = report["summary_20uas"]
    # Physical, and of the order of the EHT's (Papers VII, VIII: |m_net| 1-3.7 %,
    # <|m|> 5.7-10.7 %): a polarized image, far from fully polarized.
    assert 0.0 < s["m_net"] < 0.1 and 0.01 < s["m_avg"] < 0.3
