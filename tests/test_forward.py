"""Forward models against the numpy DFT, under jit and vmap, in both precisions."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import eqmodels as em
from tests.helpers import assert_allclose
from tests.problems import FORWARD_RTOL, FORWARDS, random_image, random_points
from tests.reference.numpy_ft import dft_matrix


GRIDS = [(16, 16), (15, 15), (12, 16), (16, 11)]
PULSES = {
    "delta": em.DeltaPulse(),
    "box": em.BoxPulse(),
    "triangle": em.TrianglePulse(),
    "gaussian": em.GaussianPulse(),
}


@pytest.mark.parametrize("name", FORWARDS)
@pytest.mark.parametrize("shape", GRIDS)
@pytest.mark.parametrize("pulse", PULSES)
def test_matches_numpy_dft(name, shape, pulse):
    grid = em.ImageGrid(*shape, em.uas_to_rad(3.0))
    u, v = random_points(grid, 57)
    img = random_image(grid)
    model = FORWARDS[name](grid, u, v, pulse=PULSES[pulse])
    expected = dft_matrix(*shape, grid.psize, u, v, pulse) @ img.ravel()
    got = model(jnp.asarray(img))
    assert got.dtype == jnp.complex128 and got.shape == u.shape
    assert_allclose(got, expected, rtol=FORWARD_RTOL[name])


def test_pulse_dtypes_and_eht_imaging_gaussian():
    """From a review: `DeltaPulse`'s dtype followed `u` alone (ints gave ints,
    float32 `u` with float64 `v` gave float32) where the others compute in
    `result_type(u, v, float)`; and `GaussianPulse(fwhm=√(8 ln 2)/3)` is
    eht-imaging's `GaussPulse2D` (σ = psize/3, as its docs state), not the
    default."""
    psize = em.uas_to_rad(2.0)
    for pulse in PULSES.values():
        got = pulse(np.arange(3), np.arange(3), psize)
        assert np.asarray(got).dtype == np.float64, pulse
        mixed = pulse(np.ones(3, np.float32), np.ones(3), psize)
        assert np.asarray(mixed).dtype == np.float64, pulse
    u = np.linspace(0.0, 1.0, 9) / psize
    sigma = psize / 3
    want = np.exp(-2 * np.pi**2 * sigma**2 * (u**2 + (0.5 * u) ** 2))
    ehtim_like = em.GaussianPulse(fwhm=np.sqrt(8 * np.log(2)) / 3)
    assert_allclose(ehtim_like(u, 0.5 * u, psize), want, rtol=1e-14)
    assert not np.allclose(em.GaussianPulse()(u, 0.5 * u, psize), want)


@pytest.mark.parametrize("name", FORWARDS)
def test_leading_shape_of_points(name):
    grid = em.ImageGrid(12, 12, em.uas_to_rad(3.0))
    u, v = random_points(grid, 0, shape=(9, 3))
    img = random_image(grid)
    model = FORWARDS[name](grid, u, v)
    got = model(jnp.asarray(img))
    assert got.shape == (9, 3)
    expected = (dft_matrix(12, 12, grid.psize, u, v) @ img.ravel()).reshape(9, 3)
    assert_allclose(got, expected, rtol=FORWARD_RTOL[name])


@pytest.mark.parametrize("name", FORWARDS)
def test_jit_and_vmap_over_images(name):
    grid = em.ImageGrid(16, 14, em.uas_to_rad(3.0))
    u, v = random_points(grid, 40)
    model = FORWARDS[name](grid, u, v)
    imgs = np.stack([random_image(grid, seed=s) for s in range(3)])
    a = dft_matrix(16, 14, grid.psize, u, v)
    expected = imgs.reshape(3, -1) @ a.T
    rtol = FORWARD_RTOL[name]
    jitted = eqx.filter_jit(lambda m, x: m(x))
    assert_allclose(jitted(model, jnp.asarray(imgs[0])), expected[0], rtol=rtol)
    assert_allclose(jax.vmap(model)(jnp.asarray(imgs)), expected, rtol=rtol)
    assert_allclose(jax.jit(jax.vmap(model))(jnp.asarray(imgs)), expected, rtol=rtol)
    # Nested vmap (a grid of images) goes through the batching rule twice (compiled:
    # op by op, its new shapes compiled each operation on its own).
    nested = jax.jit(jax.vmap(jax.vmap(model)))(jnp.asarray(imgs).reshape(3, 1, 16, 14))
    assert_allclose(nested.reshape(3, -1), expected, rtol=rtol)


def test_nufft_vmap_over_points_and_models():
    """Batched points (a vmap over models) take the per-member path."""
    grid = em.ImageGrid(12, 12, em.uas_to_rad(3.0))
    us, vs = random_points(grid, 0, shape=(3, 20))
    img = jnp.asarray(random_image(grid))

    def vis(u, v):
        return em.NUFFT(grid, u, v)(img)

    got = jax.vmap(vis)(jnp.asarray(us), jnp.asarray(vs))
    for k in range(3):
        expected = (
            dft_matrix(12, 12, grid.psize, us[k], vs[k]) @ np.asarray(img).ravel()
        )
        assert_allclose(got[k], expected, rtol=1e-10)
    # Both the points and the images batched.
    imgs = jnp.stack([img, 2 * img, 3 * img])
    got2 = jax.vmap(lambda u, v, x: em.NUFFT(grid, u, v)(x))(
        jnp.asarray(us), jnp.asarray(vs), imgs
    )
    assert_allclose(got2[2], 3 * got[2], rtol=1e-12)


@pytest.mark.parametrize("name", FORWARDS)
def test_float32(name):
    grid = em.ImageGrid(16, 16, em.uas_to_rad(3.0))
    u, v = random_points(grid, 30)
    img = random_image(grid)
    kw = {"eps": 1e-6} if name == "nufft" else {}
    model = (
        em.NUFFT(grid, u.astype(np.float32), v.astype(np.float32), **kw)
        if name == "nufft"
        else FORWARDS[name](grid, u.astype(np.float32), v.astype(np.float32))
    )
    assert model.dtype == np.float32
    got = model(jnp.asarray(img, jnp.float32))
    assert got.dtype == jnp.complex64
    expected = dft_matrix(16, 16, grid.psize, u, v) @ img.ravel()
    assert_allclose(got, expected, rtol=5e-5)
    # dtype= overrides the inputs' dtype.
    m2 = (em.NUFFT if name == "nufft" else FORWARDS[name])(
        grid, u, v, dtype=jnp.float32
    )
    assert m2.dtype == np.float32


@pytest.mark.parametrize("name", FORWARDS)
def test_at_rebuilds_same_model(name):
    grid = em.ImageGrid(10, 10, em.uas_to_rad(3.0))
    u, v = random_points(grid, 12)
    model = FORWARDS[name](grid, u, v, pulse=em.BoxPulse())
    other = model.at(u[:5], v[:5])
    assert type(other) is type(model) and other.pulse == model.pulse
    img = jnp.asarray(random_image(grid))
    assert_allclose(other(img), model(img)[:5], rtol=1e-14)


def test_three_exact_paths_agree_at_eht_scale():
    """64² over 128 µas at EHT baselines: dense, separable and NUFFT agree."""
    grid = em.ImageGrid.from_fov(64, 128.0)
    rng = np.random.default_rng(3)
    u = rng.uniform(-8.3e9, 8.3e9, 300)
    v = rng.uniform(-8.3e9, 8.3e9, 300)
    img = jnp.asarray(random_image(grid))
    d = em.DirectFT(grid, u, v)(img)
    assert_allclose(em.SeparableFT(grid, u, v)(img), d, rtol=1e-13)
    assert_allclose(em.NUFFT(grid, u, v, eps=1e-12)(img), d, rtol=1e-10)


def test_nufft_finufft_options():
    from jax_finufft.options import Opts

    grid = em.ImageGrid(12, 12, em.uas_to_rad(3.0))
    u, v = random_points(grid, 25)
    img = jnp.asarray(random_image(grid))
    model = em.NUFFT(grid, u, v, opts=Opts(nthreads=1))
    expected = dft_matrix(12, 12, grid.psize, u, v) @ np.asarray(img).ravel()
    assert_allclose(model(img), expected, rtol=1e-10)
    assert model.at(u[:3], v[:3]).opts == model.opts
    with pytest.raises(ValueError, match="modeord"):
        em.NUFFT(grid, u, v, opts=Opts(modeord=True))
    with pytest.raises(TypeError, match="opts"):
        em.NUFFT(grid, u, v, opts={"nthreads": 1})


NUFFT_BACKENDS = ["finufft", "nufftax"]


def _backend_or_skip(backend):
    if backend == "nufftax":
        pytest.importorskip("nufftax")
    return backend


@pytest.mark.parametrize("backend", NUFFT_BACKENDS)
def test_nufft_derivatives_of_every_mode_and_order_match_numpy(backend):
    """The NUFFT's transforms are primitives linear in the image (JVP: the same
    transform; transpose: the other one), so every JAX transformation works:
    forward mode, second derivatives (`jax.hessian` once re-entered a batching rule
    until XLA tried to allocate 64 GiB), `linear_transpose`, under jit and vmap.
    Checked against the dense matrix `A` in numpy: `jvp = A t`, the Hessian of
    `|A x|²` is `2 Re(Aᴴ A)`, the transpose (of a map from real images) `Re(Aᵀ c)`."""
    grid = em.ImageGrid(6, 5, em.uas_to_rad(3.0))
    u, v = random_points(grid, 23)
    nufft = em.NUFFT(grid, u, v, backend=_backend_or_skip(backend))
    a = dft_matrix(grid.ny, grid.nx, grid.psize, u, v)  # (23, 30), complex
    rng = np.random.default_rng(7)
    x, t = rng.random((2, *grid.shape))
    c = rng.standard_normal(23) + 1j * rng.standard_normal(23)
    tol = dict(rtol=1e-10, atol=1e-11)

    def loss(img):
        return jnp.sum(jnp.abs(nufft(img)) ** 2)

    value, tangent = jax.jit(lambda y, s: jax.jvp(nufft, (y,), (s,)))(x, t)
    assert_allclose(value, a @ x.ravel(), **tol)
    assert_allclose(tangent, a @ t.ravel(), **tol)
    jac = jax.jacfwd(nufft)(jnp.asarray(x))
    assert_allclose(jac.reshape(23, -1), a, **tol)
    hess = 2 * (a.conj().T @ a).real
    assert_allclose(jax.jit(jax.hessian(loss))(x).reshape(30, 30), hess, **tol)
    assert_allclose(  # reverse over reverse
        jax.grad(lambda y: jnp.vdot(jax.grad(loss)(y), t))(x).ravel(),
        hess @ t.ravel(),
        **tol,
    )
    (back,) = jax.linear_transpose(nufft, jnp.asarray(x))(c)  # real images
    assert_allclose(back.ravel(), (a.T @ c).real, **tol)
    # Batched: shared points (one multi-transform call) and batched points (a map).
    xs, ts = np.stack([x, 2 * x]), np.stack([t, -t])
    _, tangents = jax.vmap(lambda y, s: jax.jvp(nufft, (y,), (s,)))(xs, ts)
    assert_allclose(tangents, ts.reshape(2, -1) @ a.T, **tol)
    two = em.NUFFT(
        grid, np.stack([u, u[::-1]]), np.stack([v, v[::-1]]), backend=backend
    )
    flipped = dft_matrix(grid.ny, grid.nx, grid.psize, u[::-1], v[::-1])
    stacked = eqx.filter_vmap(lambda m, s: jax.jvp(m, (jnp.asarray(x),), (s,))[1])(
        _split_points(two), ts
    )
    assert_allclose(stacked[0], a @ t.ravel(), **tol)
    assert_allclose(stacked[1], flipped @ -t.ravel(), **tol)


def _split_points(model):
    """A `NUFFT` with points of shape `(2, n)` as a batch of two `(n,)` models."""
    flat = lambda x: x.reshape(2, -1)  # noqa: E731
    return eqx.tree_at(
        lambda m: (m.u, m.v, m.py, m.px, m.factor),
        model,
        tuple(flat(getattr(model, k)) for k in ("u", "v", "py", "px", "factor")),
    )


def test_points_are_data_traced_or_not():
    """A NUFFT built from traced points has zero derivatives with respect to them
    (it returned a partial, wrong one: the pulse factor's); DirectFT and
    SeparableFT, which build matrices on the host, refuse traced points with a
    message; a float32 model's `.at` keeps float32 with traced points."""
    grid = em.ImageGrid(6, 6, em.uas_to_rad(3.0))
    u, v = random_points(grid, 9, seed=3)
    img = jnp.asarray(random_image(grid))

    def loss(uu):
        return jnp.sum(jnp.abs(em.NUFFT(grid, uu, v)(img) - 1.0) ** 2)

    assert float(jnp.abs(jax.grad(loss)(jnp.asarray(u))).max()) == 0.0
    for cls in (em.DirectFT, em.SeparableFT):
        with pytest.raises(TypeError, match="cannot be traced.*NUFFT"):
            jax.jit(lambda uu, cls=cls: cls(grid, uu, v)(img))(jnp.asarray(u))
    m32 = em.NUFFT(grid, u, v, dtype=jnp.float32)
    out = jax.jit(lambda uu, vv: m32.at(uu, vv)(img.astype(jnp.float32)))(
        jnp.asarray(u), jnp.asarray(v)
    )
    assert out.dtype == jnp.complex64
    assert_allclose(out, m32(img.astype(jnp.float32)), rtol=1e-5, atol=1e-5)


def test_small_forward_model_errors():
    grid = em.ImageGrid(4, 4, em.uas_to_rad(3.0))
    with pytest.raises(ValueError, match="points are 0-d"):
        em.DirectFT(grid, 1e9, 2e9).take([0])
    with pytest.raises(TypeError, match="`backend`, `opts` are options of the NUFFT"):
        em.make_forward("direct", grid, [1e9], [2e9], opts=None, backend="auto")
    with pytest.raises(TypeError, match="cast the image") as info:
        em.DirectFT(grid, [1e9], [2e9])(jnp.ones(grid.shape, jnp.bfloat16))
    assert "dtype=jnp.bfloat16" not in str(info.value)
