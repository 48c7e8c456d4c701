"""eqmodels: differentiable forward models for interferometric imaging, as Equinox
modules on JAX."""

import importlib.metadata

from ._forward._base import AbstractForwardModel as AbstractForwardModel
from ._forward._direct import DirectFT as DirectFT
from ._forward._nufft import NUFFT as NUFFT
from ._forward._separable import SeparableFT as SeparableFT
from ._grid import ImageGrid as ImageGrid
from ._image._base import AbstractImageModel as AbstractImageModel
from ._image._pixel import PixelImage as PixelImage
from ._pulse import (
    AbstractPulse as AbstractPulse,
    BoxPulse as BoxPulse,
    DeltaPulse as DeltaPulse,
    GaussianPulse as GaussianPulse,
    TrianglePulse as TrianglePulse,
)
from ._terms._base import AbstractDataTerm as AbstractDataTerm
from ._terms._vis import VisChi2 as VisChi2
from ._units import (
    RAD_PER_DEG as RAD_PER_DEG,
    RAD_PER_UAS as RAD_PER_UAS,
    rad_to_uas as rad_to_uas,
    uas_to_rad as uas_to_rad,
)


try:
    __version__ = importlib.metadata.version("eqmodels")
except importlib.metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

# --- data products and I/O (issue 3) ---
from ._data._products import (
    AmpProducts as AmpProducts,
    BispectrumProducts as BispectrumProducts,
    ClosureAmpProducts as ClosureAmpProducts,
    ClosurePhaseProducts as ClosurePhaseProducts,
    LogClosureAmpProducts as LogClosureAmpProducts,
)
# --- end data ---

# --- terms, regularizers, image models, objective (issue 4) ---
# --- end objective ---
