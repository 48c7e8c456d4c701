import math

import numpy as np
import pytest

import eqmodels as em
from tests.reference.numpy_ft import pixel_centres


@pytest.mark.parametrize("ny,nx", [(4, 4), (5, 5), (4, 7), (64, 64)])
def test_pixel_centres_match_convention(ny, nx):
    g = em.ImageGrid(ny, nx, 1e-11)
    x, y = pixel_centres(ny, nx, 1e-11)
    np.testing.assert_array_equal(g.x, x)
    np.testing.assert_array_equal(g.y, y)
    xx, yy = g.coords()
    assert xx.shape == (ny, nx) and yy.shape == (ny, nx)
    np.testing.assert_array_equal(xx[0], x)
    np.testing.assert_array_equal(yy[:, 0], y)
    # Column 0 is east (+x), row 0 is north (+y).
    assert g.x[0] > 0 and g.y[0] > 0
    # Even axes put the phase centre on a pixel corner, odd ones on a pixel centre.
    assert (0.0 in g.x) == (nx % 2 == 1)


def test_from_fov_and_units():
    g = em.ImageGrid.from_fov(64, 128.0)
    assert g.shape == (64, 64) and g.npix == 4096
    assert math.isclose(g.psize, em.uas_to_rad(2.0), rel_tol=1e-15)
    assert math.isclose(em.rad_to_uas(g.psize), 2.0, rel_tol=1e-15)
    assert math.isclose(em.RAD_PER_UAS, math.pi / 180 / 3600 / 1e6)
    assert math.isclose(g.max_uv, 0.5 / g.psize)
    g2 = em.ImageGrid.from_fov((32, 48), 96.0)
    assert g2.shape == (32, 48)
    assert math.isclose(g2.fov[1], em.uas_to_rad(96.0), rel_tol=1e-14)
    assert "µas" in repr(g2)


@pytest.mark.parametrize(
    "args,exc,match",
    [
        ((0, 4, 1e-11), ValueError, "`ny`"),
        ((4, -1, 1e-11), ValueError, "`nx`"),
        ((4.5, 4, 1e-11), TypeError, "ny"),
        ((4, 4, 0.0), ValueError, "`psize`"),
        ((4, 4, float("nan")), ValueError, "`psize`"),
        ((4, 4, 2.0), ValueError, "radians"),
        ((4, 4, "a"), TypeError, "psize"),
    ],
)
def test_grid_errors(args, exc, match):
    with pytest.raises(exc, match=match):
        em.ImageGrid(*args)


def test_from_fov_error():
    with pytest.raises(ValueError, match="fov_uas"):
        em.ImageGrid.from_fov(64, -1.0)
