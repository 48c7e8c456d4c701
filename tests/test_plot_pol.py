"""Polarimetric plots (Agg backend): the EVPA ticks against numpy (count, cuts,
direction east of north, length, colour) and their orientation on screen, the
D-term plot's points for each input form, and the polarimetric residuals against
hand-written formulas."""

import matplotlib


matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import eqmodels as em  # noqa: E402


GRID = em.ImageGrid(12, 16, em.uas_to_rad(5.0))


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _stokes(seed=0):
    """A positive I, a polarized fraction from 0 to 0.5 and an EVPA that varies
    over the image."""
    rng = np.random.default_rng(seed)
    i = rng.uniform(0.0, 1.0, GRID.shape)
    m = rng.uniform(0.0, 0.5, GRID.shape)
    chi = rng.uniform(-np.pi, np.pi, GRID.shape)
    return (
        np.stack([i, i * m * np.cos(2 * chi), i * m * np.sin(2 * chi), 0.01 * i]),
        m,
        chi,
    )


def _segments(ax):
    (lines,) = ax.collections
    return np.asarray(lines.get_segments()), np.asarray(lines.get_array()), lines


def test_ticks_count_direction_length_and_colour_against_numpy():
    stokes, m, chi = _stokes()
    ax = em.plot_polarization(stokes, GRID, stride=2, i_cut=0.3, p_cut=0.1)
    seg, colour, _ = _segments(ax)
    # Which pixels pass, by hand: every 2nd row/column from 1, the cuts.
    i, p = stokes[0], np.hypot(stokes[1], stokes[2])
    sel = np.zeros(GRID.shape, bool)
    sel[1::2, 1::2] = True
    sel &= (i >= 0.3 * i.max()) & (p >= 0.1 * p.max())
    rows, cols = np.nonzero(sel)
    assert 5 < len(rows) < sel.size and len(seg) == len(rows)
    # Pixel centres in µas (x east, y north), as the grid defines them.
    x = (GRID.nx / 2 - 0.5 - cols) * 5.0
    y = (GRID.ny / 2 - 0.5 - rows) * 5.0
    centre = seg.mean(axis=1)
    np.testing.assert_allclose(centre, np.stack([x, y], -1), atol=1e-12)
    # Direction: (east, north) = (sin χ, cos χ) up to sign (a tick has no head).
    d = seg[:, 1] - seg[:, 0]
    angle = np.arctan2(d[:, 0], d[:, 1])  # east of north
    diff = np.mod(angle - chi[rows, cols] + np.pi / 2, np.pi) - np.pi / 2
    np.testing.assert_allclose(diff, 0.0, atol=1e-9)
    # Length ∝ |P|: the largest |P| of the image would get `stride` pixels.
    np.testing.assert_allclose(
        np.hypot(d[:, 0], d[:, 1]), 10.0 * p[rows, cols] / p.max(), rtol=1e-12
    )
    # Colour: |m| = |P| / I, on a 0..max(|m| drawn) scale.
    np.testing.assert_allclose(colour, m[rows, cols], rtol=1e-12)
    assert ax.collections[0].norm.vmin == 0.0
    assert ax.collections[0].norm.vmax == pytest.approx(m[rows, cols].max())
    ticks = em.evpa_ticks(stokes, GRID, stride=2, i_cut=0.3, p_cut=0.1)
    np.testing.assert_array_equal(ticks["row"], rows)
    assert np.all((ticks["evpa"] > -np.pi / 2) & (ticks["evpa"] <= np.pi / 2))


def test_a_north_east_tick_runs_to_the_upper_left_on_screen():
    """EVPA 45° (Q = 0, U > 0) points north-east; with east drawn to the left, the
    tick's upper end is its left end. EVPA 0 (U = 0, Q > 0) is vertical."""
    for q, u, expect in ((0.0, 0.3, "upper-left"), (0.3, 0.0, "vertical")):
        stokes = np.zeros((4, *GRID.shape))
        stokes[0, 6, 8] = 1.0
        stokes[1, 6, 8], stokes[2, 6, 8] = q, u
        ax = em.plot_polarization(stokes, GRID, stride=1)
        seg, _, _ = _segments(ax)
        assert seg.shape == (1, 2, 2)
        ax.figure.canvas.draw()
        (x0, y0), (x1, y1) = ax.transData.transform(seg[0])
        if expect == "vertical":
            assert abs(x1 - x0) < 1e-6 and abs(y1 - y0) > 5
        else:
            top, bottom = ((x0, y0), (x1, y1)) if y0 > y1 else ((x1, y1), (x0, y0))
            assert top[0] < bottom[0]  # the northern end is to the left (east)
            assert abs(abs(top[0] - bottom[0]) - abs(top[1] - bottom[1])) < 1e-6


def test_cuts_subsampling_and_the_unpolarized_image():
    stokes, _, _ = _stokes(1)
    n_all = len(_segments(em.plot_polarization(stokes, GRID, stride=1, i_cut=0,
                                               p_cut=0))[0])  # fmt: skip
    assert n_all == GRID.npix  # every pixel (all polarized, all I > 0)
    n_default = len(_segments(em.plot_polarization(stokes, GRID))[0])
    assert 0 < n_default < n_all  # default: about 20 across (stride 1 here), cuts
    n_sub = len(_segments(em.plot_polarization(stokes, GRID, stride=3, i_cut=0,
                                               p_cut=0))[0])  # fmt: skip
    assert n_sub == len(range(1, 12, 3)) * len(range(1, 16, 3))
    flat = stokes.copy()
    flat[1:3] = 0.0
    ax = em.plot_polarization(flat, GRID)
    assert len(_segments(ax)[0]) == 0 and len(ax.images) == 1


def test_figure_parts_and_a_model():
    model = em.PolGaussianImage(
        GRID, 0.6, em.uas_to_rad(25.0), frac=0.2, evpa=0.3, dtype=np.float64
    )
    ax = em.plot_polarization(model, beam=(20.0, 15.0, 30.0), title="M87",
                              m_range=(0.0, 0.4))  # fmt: skip
    assert ax.get_title() == "M87" and len(ax.patches) == 1
    assert ax.xaxis_inverted()
    assert len(ax.figure.axes) == 2  # the panel and the |m| colour bar
    assert "|m|" in ax.figure.axes[1].get_ylabel()
    seg, colour, lines = _segments(ax)
    assert lines.norm.vmax == 0.4
    np.testing.assert_allclose(colour, 0.2, rtol=1e-9)  # uniform m
    d = seg[:, 1] - seg[:, 0]
    np.testing.assert_allclose(
        np.mod(np.arctan2(d[:, 0], d[:, 1]), np.pi), 0.3, atol=1e-9
    )
    arr = np.asarray(model())
    np.testing.assert_allclose(ax.images[0].get_array(), arr[0] / 25.0)
    # The same from the array, on given axes, no colour bar.
    fig, own = plt.subplots()
    out = em.plot_polarization(arr, GRID, own, colorbar=False)
    assert out is own and len(fig.axes) == 1
    np.testing.assert_allclose(_segments(out)[0], seg)


def test_plot_polarization_errors():
    stokes, _, _ = _stokes()
    with pytest.raises(ValueError, match=r"\(4, 12, 16\)"):
        em.plot_polarization(stokes[:3], GRID)
    with pytest.raises(TypeError, match="`grid` is required"):
        em.plot_polarization(stokes)
    with pytest.raises(TypeError, match="plot_image"):
        em.plot_polarization(em.GaussianImage(GRID, 1.0, em.uas_to_rad(20.0)))
    with pytest.raises(ValueError, match="`stride`"):
        em.plot_polarization(stokes, GRID, stride=0)
    with pytest.raises(ValueError, match="`i_cut`"):
        em.plot_polarization(stokes, GRID, i_cut=1.5)
    with pytest.raises(ValueError, match="`m_range`"):
        em.plot_polarization(stokes, GRID, m_range=(0.5, 0.1))
    with pytest.raises(ValueError, match="`beam`"):
        em.plot_polarization(stokes, GRID, beam=(-1.0, 1.0, 0.0))
    with pytest.raises(ValueError, match="Tb"):
        em.plot_polarization(stokes, GRID, units="Tb")
    bad = stokes.copy()
    bad[0, 0, 0] = np.nan
    with pytest.raises(ValueError, match="non-finite"):
        em.plot_polarization(bad, GRID)


# ------------------------------------------------------------------- D-terms
DTERMS = {
    "AA": (0.01 + 0.02j, -0.03 + 0.01j),
    "LM": (np.array([0.1 - 0.05j, 0.12 - 0.04j]), np.array([-0.08j, 0.02 - 0.07j])),
}


def _points(ax):
    return {c.get_gid(): np.asarray(c.get_offsets()) for c in ax.collections}


def _check_points(points, table):
    assert set(points) == {f"{s}:{f}" for s in table for f in "RL"}
    for s, (d_r, d_l) in table.items():
        for feed, d in (("R", d_r), ("L", d_l)):
            d = np.atleast_1d(d)
            np.testing.assert_array_equal(
                points[f"{s}:{feed}"], np.stack([d.real, d.imag], -1)
            )


def test_dterms_from_a_dict_and_a_to_dict_object():
    ax = em.plot_dterms(DTERMS, title="D-terms")
    _check_points(_points(ax), DTERMS)
    assert ax.get_title() == "D-terms"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "AA", "LM", "D_R", "D_L"
    ]  # fmt: skip
    lim = ax.get_xlim()
    assert lim[0] == -lim[1] and lim[1] >= 0.12 and ax.get_ylim() == lim

    class Table:
        def to_dict(self):
            return DTERMS

    _check_points(_points(em.plot_dterms(Table())), DTERMS)
    ax = em.plot_dterms(DTERMS, stations=["LM"], legend=False)
    _check_points(_points(ax), {"LM": DTERMS["LM"]})
    assert ax.get_legend() is None


def test_dterms_from_station_jones():
    """Its D-terms per station, where the station has data (LM has no rows)."""
    data = _pol_data(np.zeros((6, 4), complex) + 0.5, names=("AA", "AP", "SM", "LM"))
    d = np.zeros((1, 4, 2), complex)
    d[0, :, 0] = 0.01 * np.arange(1, 5) + 0.02j
    d[0, :, 1] = -0.03j * np.arange(1, 5)
    jones = em.StationJones.from_data(data, dterms=d, field_rotation=np.zeros((6, 2)))
    ax = em.plot_dterms(jones)
    table = {s: (d[0, k, 0], d[0, k, 1]) for k, s in enumerate(("AA", "AP", "SM"))}
    _check_points(_points(ax), table)


def test_dterms_errors():
    with pytest.raises(TypeError, match="StationJones, a dict"):
        em.plot_dterms([0.1, 0.2])
    with pytest.raises(ValueError, match=r"pair \(d_R, d_L\)"):
        em.plot_dterms({"AA": 0.1})
    with pytest.raises(ValueError, match="no D-terms here"):
        em.plot_dterms(DTERMS, stations=["PV"])
    with pytest.raises(TypeError, match="list of station names"):
        em.plot_dterms(DTERMS, stations="AA")
    with pytest.raises(ValueError, match="non-finite"):
        em.plot_dterms({"AA": (np.nan, 0.0)})
    with pytest.raises(TypeError, match="legend"):  # the type checker, or ours
        em.plot_dterms(DTERMS, legend="no")


# ------------------------------------------------------------ pol residuals
def _pol_data(stokes_vis, seed=0, names=("AA", "AP", "SM")):
    """Rows whose correlations are the ideal correlations of `stokes_vis`
    (circular feeds), plus known offsets, with σ per correlation."""
    rng = np.random.default_rng(seed)
    n = stokes_vis.shape[0]
    i, q, u, v = stokes_vis.T
    corr = np.stack([i + v, i - v, q + 1j * u, q - 1j * u], 1)
    corr = corr + 0.01 * (rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4)))
    sigma = rng.uniform(0.005, 0.02, (n, 4))
    return em.PolVisData(
        rng.uniform(-4e9, 4e9, n), rng.uniform(-4e9, 4e9, n), corr, sigma,
        np.repeat(np.arange(n // 3, dtype=float), 3), np.array([0, 0, 1] * (n // 3)),
        np.array([1, 2, 2] * (n // 3)), station_names=names,
        freq=230e9,
    )  # fmt: skip


def test_pol_residuals_against_the_formulas():
    rng = np.random.default_rng(2)
    n = 12
    model = np.stack(
        [rng.uniform(0.2, 0.6, n) + 0.1j * rng.normal(size=n)]
        + [0.05 * (rng.normal(size=n) + 1j * rng.normal(size=n)) for _ in range(3)],
        axis=1,
    )
    data = _pol_data(model)
    res = em.pol_residuals(data, model)
    c, s = np.asarray(data.corr), np.asarray(data.sigma)
    # By hand, from the correlations: I = (RR + LL)/2, P = Q + iU = RL (circular),
    # σ_I = ½√(σ_RR² + σ_LL²), σ_Q = σ_U = ½√(σ_RL² + σ_LR²).
    i_d, p_d = 0.5 * (c[:, 0] + c[:, 1]), c[:, 2]
    m_d = p_d / i_d
    sq = 0.5 * np.sqrt(s[:, 2] ** 2 + s[:, 3] ** 2)
    si = 0.5 * np.sqrt(s[:, 0] ** 2 + s[:, 1] ** 2)
    sig_m = np.sqrt(2 * sq**2 + si**2 * np.abs(m_d) ** 2) / np.abs(i_d)
    m_m = (model[:, 1] + 1j * model[:, 2]) / model[:, 0]
    np.testing.assert_allclose(res["m_data"], m_d, rtol=1e-12)
    np.testing.assert_allclose(res["sigma_m"], sig_m, rtol=1e-12)
    np.testing.assert_allclose(res["m_residual"], (m_m - m_d) / sig_m, rtol=1e-10)
    rl = model[:, 1] + 1j * model[:, 2]
    lr = model[:, 1] - 1j * model[:, 2]
    np.testing.assert_allclose(
        res["cross_residual"],
        np.stack([(rl - c[:, 2]) / s[:, 2], (lr - c[:, 3]) / s[:, 3]], 1),
        rtol=1e-10,
    )
    assert list(res["cross_names"]) == ["RL", "LR"]
    np.testing.assert_allclose(res["uvdist"], np.hypot(data.u, data.v))


@pytest.mark.slow  # compiles the Jones matrices op by op (about 6 s)
def test_pol_residuals_through_jones_matrices():
    """With D-terms, the model's correlations are J_a C J_bᴴ (no field
    rotation): written out by hand for each row."""
    rng = np.random.default_rng(3)
    n = 9
    model = np.stack(
        [np.full(n, 0.5 + 0j)]
        + [0.05 * (rng.normal(size=n) + 1j * rng.normal(size=n)) for _ in range(3)],
        axis=1,
    )
    data = _pol_data(model)
    d = 0.05 * (rng.normal(size=(1, 3, 2)) + 1j * rng.normal(size=(1, 3, 2)))
    jones = em.StationJones.from_data(data, dterms=d, field_rotation=np.zeros((n, 2)))
    res = em.pol_residuals(data, model, jones=jones)
    a1, a2 = np.asarray(data.ant1), np.asarray(data.ant2)
    i, q, u, v = model.T
    expect = []
    for k in range(n):
        c = np.array([[i[k] + v[k], q[k] + 1j * u[k]], [q[k] - 1j * u[k], i[k] - v[k]]])
        ja = np.array([[1, d[0, a1[k], 0]], [d[0, a1[k], 1], 1]])
        jb = np.array([[1, d[0, a2[k], 0]], [d[0, a2[k], 1], 1]])
        o = ja @ c @ jb.conj().T
        expect.append([o[0, 0], o[1, 1], o[0, 1], o[1, 0]])
    expect = np.array(expect)
    c, s = np.asarray(data.corr), np.asarray(data.sigma)
    np.testing.assert_allclose(
        res["cross_residual"], (expect[:, 2:] - c[:, 2:]) / s[:, 2:], rtol=1e-9
    )
    m_m = expect[:, 2] / (0.5 * (expect[:, 0] + expect[:, 1]))
    np.testing.assert_allclose(res["m_model"], m_m, rtol=1e-9)


@pytest.mark.slow  # two exact transforms compiled op by op (2-5 s)
def test_pol_residual_plot_from_an_image():
    model = em.PolGaussianImage(
        GRID, 0.6, em.uas_to_rad(25.0), frac=0.2, evpa=0.3, dtype=np.float64
    )
    vis = np.asarray(
        em.DirectFT(GRID, np.zeros(1), np.zeros(1)).batched(model())
    )  # a shape check of the batched output: (4, points)
    assert vis.shape == (4, 1)
    data = _pol_data(np.zeros((12, 4), complex) + [0.5, 0.05, 0.02, 0.0])
    fwd = em.DirectFT(GRID, np.asarray(data.u), np.asarray(data.v))
    direct = np.asarray(fwd.batched(model())).T
    a = em.pol_residuals(data, model)
    b = em.pol_residuals(data, direct)
    np.testing.assert_allclose(a["m_residual"], b["m_residual"], rtol=1e-9)
    fig = em.plot_pol_residuals(data, model, title="residuals")
    assert len(fig.axes) == 3 and fig._suptitle.get_text() == "residuals"
    # Panel 2: the real and imaginary parts of m̆'s residual, at |uv| in Gλ.
    re_line = fig.axes[1].lines[1]  # after the zero line
    np.testing.assert_allclose(re_line.get_xdata(), a["uvdist"] / 1e9)
    np.testing.assert_allclose(re_line.get_ydata(), a["m_residual"].real)
    labels = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    assert [lab.split(" (")[0] for lab in labels] == [
        "Re RL",
        "Im RL",
        "Re LR",
        "Im LR",
    ]
    rms = np.sqrt(np.mean(a["cross_residual"][:, 0].real ** 2))
    assert labels[0] == f"Re RL (RMS {rms:.2f})"
    with pytest.raises(TypeError, match="PolVisData"):
        em.plot_pol_residuals(data.stokes_i(), model)
    with pytest.raises(ValueError, match=r"\(12, 4\)"):
        em.pol_residuals(data, np.zeros((5, 4), complex))
    with pytest.raises(TypeError, match="three matplotlib Axes"):
        em.plot_pol_residuals(data, model, axes=[fig.axes[0]])


def test_pol_residuals_linear_feeds():
    """Linear feeds: XX = I + Q, YY = I − Q, XY = U + iV, YX = U − iV; m̆ from
    I = (XX + YY)/2, Q = (XX − YY)/2, U = (XY + YX)/2."""
    rng = np.random.default_rng(4)
    n = 6
    model = np.stack(
        [rng.uniform(0.3, 0.6, n) + 0j]
        + [0.05 * (rng.normal(size=n) + 1j * rng.normal(size=n)) for _ in range(3)],
        axis=1,
    )
    i, q, u, v = model.T
    corr = np.stack([i + q, i - q, u + 1j * v, u - 1j * v], 1)
    corr = corr + 0.01 * (rng.normal(size=(n, 4)) + 1j * rng.normal(size=(n, 4)))
    sigma = np.full((n, 4), 0.01)
    data = em.PolVisData(
        rng.uniform(-4e9, 4e9, n), rng.uniform(-4e9, 4e9, n), corr, sigma,
        np.repeat([0.0, 1.0], 3), np.array([0, 0, 1] * 2), np.array([1, 2, 2] * 2),
        station_names=("AA", "AP", "SM"), freq=230e9, feeds=("linear",) * 3,
    )  # fmt: skip
    res = em.pol_residuals(data, model)
    assert list(res["cross_names"]) == ["XY", "YX"]
    c = corr
    i_d = 0.5 * (c[:, 0] + c[:, 1])
    p_d = 0.5 * (c[:, 0] - c[:, 1]) + 0.5j * (c[:, 2] + c[:, 3])
    np.testing.assert_allclose(res["m_data"], p_d / i_d, rtol=1e-12)
    np.testing.assert_allclose(res["m_model"], (q + 1j * u) / i, rtol=1e-12)
    np.testing.assert_allclose(
        res["cross_residual"][:, 0], (u + 1j * v - c[:, 2]) / 0.01, rtol=1e-10
    )
