"""`ring_center`: the centre and radius of a ring (REx's criterion), against rings
of known centre, the spread it reports recomputed with scipy, and its refusals."""

import math

import numpy as np
import pytest
from scipy.ndimage import map_coordinates

import eqmodels as em


GRID = em.ImageGrid.from_fov(64, 128.0)
UAS = em.uas_to_rad(1.0)
BOUNDS = dict(r_min=10 * UAS, r_max=35 * UAS)


def ring(asymmetry, x0=3.0, y0=-2.0):
    model = em.RingImage(
        GRID, 0.6, 40 * UAS, 8 * UAS, x0=x0 * UAS, y0=y0 * UAS,
        asymmetry=asymmetry, asymmetry_angle=math.pi,
    )  # fmt: skip
    return np.asarray(model())


def centroid(image):
    xx, yy = GRID.coords()
    return (image * xx).sum() / image.sum(), (image * yy).sum() / image.sum()


@pytest.mark.parametrize("asymmetry", [0.0, 0.5, 0.95])
def test_finds_the_centre_of_a_lopsided_ring(asymmetry):
    image = ring(asymmetry)
    out = em.ring_center(image, GRID, **BOUNDS)
    # Within the quarter-pixel search step (0.5 µas here) of the truth.
    assert abs(out["x0"] / UAS - 3.0) <= 0.5 and abs(out["y0"] / UAS + 2.0) <= 0.5
    assert abs(out["radius"] / UAS - 20.0) <= 0.5
    if asymmetry > 0.5:
        # The centroid is pulled towards the bright (south) side, far off.
        assert centroid(image)[1] / UAS < -2.0 - 5.0


def test_four_planes_give_the_stokes_i_answer():
    image = ring(0.5)
    planes = np.stack([image, 0.1 * image, -0.05 * image, 0 * image])
    assert em.ring_center(planes, GRID, **BOUNDS) == em.ring_center(
        image, GRID, **BOUNDS
    )


def test_reported_spread_is_that_of_the_peak_radii_there():
    """At the returned centre, the brightest radius along each of the 72
    directions (the image interpolated bilinearly by scipy) spreads as reported,
    and averages to the reported radius."""
    image = ring(0.8, x0=-5.0, y0=4.0)
    out = em.ring_center(image, GRID, **BOUNDS)
    psize = float(GRID.psize)
    lo, hi = BOUNDS["r_min"], BOUNDS["r_max"]
    radii = np.linspace(lo, hi, int(math.ceil(4 * (hi - lo) / psize)) + 1)
    peaks = []
    for k in range(72):
        angle = 2 * math.pi * k / 72
        xs = out["x0"] + radii * math.sin(angle)
        ys = out["y0"] + radii * math.cos(angle)
        cols = (GRID.nx / 2 - 0.5) - xs / psize
        rows = (GRID.ny / 2 - 0.5) - ys / psize
        profile = map_coordinates(image, [rows, cols], order=1, mode="constant")
        peaks.append(radii[np.argmax(profile)])
    np.testing.assert_allclose(out["radius_std"], np.std(peaks), rtol=1e-12)
    np.testing.assert_allclose(out["radius"], np.mean(peaks), rtol=1e-12)


def test_m87_recipe_ring(shared_data):
    """The EHT pipeline's 2017-04-11 image: a ring of radius near 20 µas (Paper
    IV: diameter 42 ± 3 µas), its centre north of the centroid (the ring is
    brighter in the south)."""
    path = shared_data / "reference" / "m87_2017_101_ehtim_pipeline.fits"
    if not path.is_file():
        pytest.skip("the EHT pipeline's image is not in ../shared")
    image, grid = em.load_fits(path)
    image = np.asarray(image, np.float64)
    out = em.ring_center(image, grid, **BOUNDS)
    assert 18.0 < out["radius"] / UAS < 23.0
    xx, yy = grid.coords()
    cy = (image * yy).sum() / image.sum()
    assert out["y0"] > cy


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(image=np.zeros((32, 32))), ValueError, r"shape \(32, 32\)"),
        (dict(image="nan"), ValueError, "NaN or inf"),
        (dict(image="zero"), ValueError, "total flux is 0.0"),
        (dict(r_min=-1 * UAS), ValueError, "`r_min` must be finite and >= 0"),
        (dict(r_max=5 * UAS), ValueError, r"`r_max` \(.*\) must exceed `r_min`"),
        (dict(r_max=math.inf), ValueError, "`r_max` must be finite"),
        (dict(n_angles=4), ValueError, "`n_angles` must be at least 8"),
        (dict(search=-UAS), ValueError, "`search` must be finite and >= 0"),
        (dict(r_min=40 * UAS, r_max=60 * UAS), ValueError, "widen"),
    ],
)
def test_refuses_bad_arguments(kwargs, error, message):
    image = ring(0.5)
    special = kwargs.get("image")
    if isinstance(special, str) and special == "nan":
        image = image.copy()
        image[3, 3] = np.nan
        kwargs = dict(kwargs, image=image)
    elif isinstance(special, str) and special == "zero":
        kwargs = dict(kwargs, image=0 * image)
    args = dict(dict(image=image, **BOUNDS), **kwargs)
    with pytest.raises(error, match=message):
        em.ring_center(args.pop("image"), GRID, **args)


def test_refuses_wrong_types():
    image = ring(0.5)
    # The tests run jaxtyping's type checks; without them the function's own
    # check names the argument the same way.
    with pytest.raises(TypeError, match="n_angles"):
        em.ring_center(image, GRID, **BOUNDS, n_angles=72.0)
    with pytest.raises(TypeError, match="grid"):
        em.ring_center(image, "grid", **BOUNDS)
