"""eqmodels: differentiable forward models for interferometric imaging, as Equinox
modules on JAX.

Where to start:

- The README's quick start: `python -m eqmodels image --png m87.png` images M87
  (EHT 2017-04-10, the file the package ships, `eqmodels.example_uvfits()`) with the
  published recipe; `python -m eqmodels --help` lists the options. Its "A first
  look" snippet builds an objective and solves it in twenty lines.
- The docs (`docs/*.md`, `mkdocs serve`): `index.md` (the pages, and the names
  their snippets start from), `recipe.md` (from uvfits to an image), `data.md`,
  `terms.md`, `objective.md`, `solvers.md`, `plots.md`, `extending.md`,
  `errors.md`.
- The main entry points: `load_uvfits` → `VisData` (and `closure_phases`,
  `log_closure_amplitudes`, `amplitudes`); `ImageGrid`, `PixelImage`,
  `GaussianImage`; the data terms `VisChi2`, `ClosurePhaseChi2`,
  `LogClosureAmpChi2` (each `.from_data(products, grid)`); regularizers
  `SimpleEntropy`, `TV`, `Flux`; `Objective` (or `w1 * term1 + w2 * term2`);
  `solve`; `image_m87` (the published recipe); `plot_image`; `save_fits`.
- `examples/` in a checkout: `quickstart.py`, `m87_walkthrough.py`, ...

Every public name is in `eqmodels.__all__`, each with its own `help()`.
"""

import importlib.metadata as _metadata

from ._forward._aliasing import AliasingWarning as AliasingWarning
from ._forward._base import AbstractForwardModel as AbstractForwardModel
from ._forward._direct import DirectFT as DirectFT
from ._forward._nufft import NUFFT as NUFFT
from ._forward._separable import SeparableFT as SeparableFT
from ._grid import ImageGrid as ImageGrid
from ._image._base import AbstractImageModel as AbstractImageModel
from ._image._pixel import PixelImage as PixelImage
from ._image._pol_base import AbstractPolImageModel as AbstractPolImageModel
from ._image._pol_pixel import PolPixelImage as PolPixelImage
from ._image._pol_rescaled import RescaledPolPixels as RescaledPolPixels
from ._image._pol_spherical import PolSphericalImage as PolSphericalImage
from ._pulse import (
    AbstractPulse as AbstractPulse,
    BoxPulse as BoxPulse,
    DeltaPulse as DeltaPulse,
    GaussianPulse as GaussianPulse,
    TrianglePulse as TrianglePulse,
)
from ._terms._base import (
    AbstractDataTerm as AbstractDataTerm,
    n_rows_leaf as n_rows_leaf,
)
from ._terms._vis import VisChi2 as VisChi2
from ._units import (
    RAD_PER_DEG as RAD_PER_DEG,
    RAD_PER_UAS as RAD_PER_UAS,
    rad_to_uas as rad_to_uas,
    uas_to_rad as uas_to_rad,
)


try:
    __version__ = _metadata.version("eqmodels")
except _metadata.PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0"

# --- data products and I/O ---
from ._compile import compiler_options as compiler_options
from ._data._derived import (
    amplitudes as amplitudes,
    bispectra as bispectra,
    closure_amplitudes as closure_amplitudes,
    closure_phases as closure_phases,
    log_closure_amplitudes as log_closure_amplitudes,
)
from ._data._examples import example_uvfits as example_uvfits
from ._data._fitsimage import load_fits as load_fits, save_fits as save_fits
from ._data._gains import apply_gains as apply_gains
from ._data._noise import (
    add_fractional_noise as add_fractional_noise,
    add_systematic_noise as add_systematic_noise,
)
from ._data._observe import (
    observe as observe,
    thermal_sigma as thermal_sigma,
    uv_tracks as uv_tracks,
)
from ._data._observe_same import observe_same as observe_same
from ._data._polvisdata import concatenate as concatenate, PolVisData as PolVisData
from ._data._products import (
    AmpProducts as AmpProducts,
    BispectrumProducts as BispectrumProducts,
    ClosureAmpProducts as ClosureAmpProducts,
    ClosurePhaseProducts as ClosurePhaseProducts,
    LogClosureAmpProducts as LogClosureAmpProducts,
)
from ._data._stations import EHT2017 as EHT2017, StationTable as StationTable
from ._data._uvfits import load_uvfits as load_uvfits
from ._data._uvfits_write import save_uvfits as save_uvfits
from ._data._visdata import VisData as VisData

# --- end data ---
# --- terms, regularizers, image models, objective ---
from ._forward._select import make_forward as make_forward
from ._geometric._base import (
    AbstractGeometricModel as AbstractGeometricModel,
    Sum as Sum,
)
from ._geometric._blurred import Blurred as Blurred
from ._geometric._crescent import Crescent as Crescent
from ._geometric._disk import Disk as Disk
from ._geometric._gaussian import EllipticalGaussian as EllipticalGaussian
from ._geometric._mring import MRing as MRing
from ._geometric._pol_base import AbstractPolGeometricModel as AbstractPolGeometricModel
from ._geometric._pol_mring import PolMRing as PolMRing
from ._geometric._polarized import Polarized as Polarized
from ._geometric._transforms import (
    Rotated as Rotated,
    Shifted as Shifted,
    Stretched as Stretched,
)
from ._geometric._xsringauss import XSRingauss as XSRingauss
from ._image._beta import beta_m as beta_m
from ._image._gaussian import GaussianImage as GaussianImage
from ._image._pol_gaussian import PolGaussianImage as PolGaussianImage
from ._image._pol_mring import PolMRingImage as PolMRingImage
from ._image._pol_summary import polarization_summary as polarization_summary
from ._image._ring import RingImage as RingImage
from ._image._ring_center import ring_center as ring_center
from ._plot._amplitudes import plot_amplitudes as plot_amplitudes
from ._plot._closures import (
    closure_phase_residuals as closure_phase_residuals,
    plot_closure_phase_residuals as plot_closure_phase_residuals,
)
from ._plot._dterms import plot_dterms as plot_dterms
from ._plot._image import (
    image_in_units as image_in_units,
    plot_image as plot_image,
    plot_images as plot_images,
)
from ._plot._pol_residuals import (
    plot_pol_residuals as plot_pol_residuals,
    pol_residuals as pol_residuals,
)
from ._plot._polarization import (
    evpa_ticks as evpa_ticks,
    plot_polarization as plot_polarization,
)
from ._plot._uv import plot_uv_coverage as plot_uv_coverage
from ._regularizers._base import (
    AbstractRegularizer as AbstractRegularizer,
    beam_from_uv as beam_from_uv,
)
from ._regularizers._entropy import (
    GullSkillingEntropy as GullSkillingEntropy,
    SimpleEntropy as SimpleEntropy,
)
from ._regularizers._flux import Flux as Flux
from ._regularizers._moments import (
    Centroid as Centroid,
    Compactness as Compactness,
    Compactness2 as Compactness2,
    GaussianMoments as GaussianMoments,
)
from ._regularizers._pol_entropy import (
    HolographicEntropy as HolographicEntropy,
    PolEntropy as PolEntropy,
)
from ._regularizers._pol_smoothness import PolTV as PolTV
from ._regularizers._smoothness import TSV as TSV, TV as TV
from ._regularizers._sparsity import L1 as L1, WeightedL1 as WeightedL1
from ._regularizers._stokes_v import (
    StokesVFlux as StokesVFlux,
    StokesVL1 as StokesVL1,
    StokesVL2 as StokesVL2,
    StokesVTSV as StokesVTSV,
    StokesVTV as StokesVTV,
)
from ._sharding._forward import ShardedForward as ShardedForward
from ._sharding._mesh import (
    AbstractSharded as AbstractSharded,
    sharded_parts as sharded_parts,
)
from ._solvers._base import (
    AbstractSolver as AbstractSolver,
    ObjectiveFunction as ObjectiveFunction,
    SolverOptions as SolverOptions,
    stop_test as stop_test,
)
from ._solvers._cache import enable_compilation_cache as enable_compilation_cache
from ._solvers._common import is_real_float_array as is_real_float_array
from ._solvers._jacobian import residual_jacobian as residual_jacobian
from ._solvers._lbfgs import BacktrackingState as BacktrackingState, LBFGS as LBFGS
from ._solvers._least_squares import (
    AbstractLeastSquaresSolver as AbstractLeastSquaresSolver,
    GaussNewton as GaussNewton,
    LeastSquaresState as LeastSquaresState,
    LevenbergMarquardt as LevenbergMarquardt,
)
from ._solvers._optax import (
    AbstractGradientSolver as AbstractGradientSolver,
    Adam as Adam,
    OptaxSolver as OptaxSolver,
    OptaxState as OptaxState,
)
from ._solvers._results import RESULTS as RESULTS
from ._solvers._scipy import solve_scipy as solve_scipy
from ._solvers._solve import (
    Solution as Solution,
    solve as solve,
    unconstrained_parameters as unconstrained_parameters,
)
from ._solvers._survey import survey as survey, SurveyResult as SurveyResult
from ._stack import pad_and_stack as pad_and_stack, pad_to_match as pad_to_match
from ._terms._amp import AmpChi2 as AmpChi2
from ._terms._band_sharded import (
    BandShardedChi2 as BandShardedChi2,
    shard_bands as shard_bands,
)
from ._terms._bispectrum import BispectrumChi2 as BispectrumChi2
from ._terms._camp import ClosureAmpChi2 as ClosureAmpChi2
from ._terms._cphase import ClosurePhaseChi2 as ClosurePhaseChi2
from ._terms._frac_pol import FracPolChi2 as FracPolChi2
from ._terms._logcamp import LogClosureAmpChi2 as LogClosureAmpChi2
from ._terms._objective import AbstractTerm as AbstractTerm, Objective as Objective
from ._terms._pol_vis import PolVisChi2 as PolVisChi2
from ._terms._sharded import ShardedChi2 as ShardedChi2
from ._terms._stokes_v import StokesVChi2 as StokesVChi2
from ._terms._wrapper import AbstractTermWrapper as AbstractTermWrapper


# --- end objective ---
# isort: split
# --- gains and self-calibration ---
from ._data._recipe_ops import (
    blur_image as blur_image,
    rescale_zero_baseline as rescale_zero_baseline,
    reverse_taper as reverse_taper,
    taper as taper,
)
from ._gains._abstract import AbstractGains as AbstractGains
from ._gains._corrected import GainCorrected as GainCorrected
from ._gains._dterm_table import DTermTable as DTermTable
from ._gains._intervals import solution_intervals as solution_intervals
from ._gains._joint import WithGains as WithGains
from ._gains._priors import (
    AbstractGainPrior as AbstractGainPrior,
    GainAmplitudePrior as GainAmplitudePrior,
    GainPhaseReference as GainPhaseReference,
    GainSmoothness as GainSmoothness,
)
from ._gains._rl_gain_table import RLGainTable as RLGainTable
from ._gains._selfcal import self_calibrate as self_calibrate
from ._gains._station_gains import StationGains as StationGains
from ._gains._with_gains import with_gains as with_gains
from ._polcal._leakage import leakage_calibrate as leakage_calibrate
from ._polcal._polgains import polgains_calibrate as polgains_calibrate


# --- end gains ---
# isort: split
# --- station Jones matrices, correlations and closure traces ---
from ._data._closure_traces import (
    closure_traces as closure_traces,
    ClosureTraceProducts as ClosureTraceProducts,
)
from ._gains._jones_abstract import AbstractJones as AbstractJones
from ._gains._jones_corrected import JonesCorrected as JonesCorrected
from ._gains._jones_priors import (
    DTermPrior as DTermPrior,
    JonesGainPrior as JonesGainPrior,
)
from ._gains._station_jones import StationJones as StationJones
from ._terms._closure_trace import ClosureTraceChi2 as ClosureTraceChi2
from ._terms._correlation import CorrelationChi2 as CorrelationChi2


# --- end Jones ---
# isort: split
# --- several frequencies in one image ---
from ._data._multiband import MultiBandData as MultiBandData
from ._image._multifreq import MultiFrequencyImage as MultiFrequencyImage
from ._regularizers._spectral import SpectralL2 as SpectralL2, SpectralTV as SpectralTV
from ._terms._at_frequency import AtFrequency as AtFrequency


# --- end multi-frequency ---
# isort: split
# --- posteriors ---
from ._posterior._dirichlet import DirichletPrior as DirichletPrior
from ._posterior._evidence import (
    Evidence as Evidence,
    evidence as evidence,
    laplace_evidence as laplace_evidence,
)
from ._posterior._gmrf import GMRFPrior as GMRFPrior
from ._posterior._gmrf_hyper import GMRFHyperPrior as GMRFHyperPrior
from ._posterior._gmrf_image import GMRFImage as GMRFImage
from ._posterior._laplace import Laplace as Laplace, laplace as laplace
from ._posterior._posterior import Posterior as Posterior
from ._posterior._priors import (
    AbstractPrior as AbstractPrior,
    ParameterPrior as ParameterPrior,
)
from ._posterior._sample import sample as sample, Samples as Samples
from ._posterior._simplex import SimplexImage as SimplexImage


# --- end posteriors ---
# isort: split
# --- posterior summaries and plots ---
from ._plot._posterior import (
    plot_corner as plot_corner,
    plot_image_summary as plot_image_summary,
    plot_ppc as plot_ppc,
    plot_trace as plot_trace,
)
from ._posterior._arviz import to_arviz as to_arviz
from ._posterior._image_summary import (
    image_summary as image_summary,
    ImageSummary as ImageSummary,
)
from ._posterior._ppc import closure_ppc as closure_ppc, ClosurePPC as ClosurePPC


# --- end posterior summaries and plots ---
# isort: split
# --- recipes and command line ---
from ._recipe._m87 import (
    closure_score as closure_score,
    image_m87 as image_m87,
    m87_systematic_noise as m87_systematic_noise,
)
from ._recipe._m87_pol import image_m87_pol as image_m87_pol
from ._recipe._multifreq import image_multifreq as image_multifreq


# --- end recipes ---


# The public API: every name above, for `help(eqmodels)` and `from eqmodels import *`
# (tests/test_api.py keeps it in step with the imports and the API reference).
__all__ = [
    "AbstractDataTerm",
    "AbstractForwardModel",
    "AbstractGainPrior",
    "AbstractGains",
    "AbstractGeometricModel",
    "AbstractGradientSolver",
    "AbstractImageModel",
    "AbstractJones",
    "AbstractLeastSquaresSolver",
    "AbstractPolImageModel",
    "AbstractPrior",
    "AbstractPulse",
    "AbstractRegularizer",
    "AbstractSolver",
    "AbstractSharded",
    "AbstractTerm",
    "AbstractTermWrapper",
    "BacktrackingState",
    "Adam",
    "AliasingWarning",
    "add_fractional_noise",
    "add_systematic_noise",
    "AmpChi2",
    "amplitudes",
    "AmpProducts",
    "apply_gains",
    "AtFrequency",
    "beam_from_uv",
    "beta_m",
    "bispectra",
    "BispectrumChi2",
    "BispectrumProducts",
    "blur_image",
    "Blurred",
    "BoxPulse",
    "Centroid",
    "closure_amplitudes",
    "closure_phase_residuals",
    "closure_phases",
    "closure_score",
    "closure_traces",
    "ClosureAmpChi2",
    "ClosureAmpProducts",
    "ClosurePhaseChi2",
    "ClosurePhaseProducts",
    "ClosureTraceChi2",
    "ClosureTraceProducts",
    "Compactness",
    "Compactness2",
    "concatenate",
    "CorrelationChi2",
    "Crescent",
    "DeltaPulse",
    "DirectFT",
    "DirichletPrior",
    "Disk",
    "DTermPrior",
    "DTermTable",
    "EHT2017",
    "compiler_options",
    "EllipticalGaussian",
    "Evidence",
    "evidence",
    "enable_compilation_cache",
    "evpa_ticks",
    "example_uvfits",
    "Flux",
    "FracPolChi2",
    "GainAmplitudePrior",
    "GainCorrected",
    "GainPhaseReference",
    "GainSmoothness",
    "GaussianImage",
    "GaussianMoments",
    "GaussianPulse",
    "GMRFHyperPrior",
    "GMRFImage",
    "GMRFPrior",
    "GaussNewton",
    "GullSkillingEntropy",
    "HolographicEntropy",
    "image_in_units",
    "image_m87",
    "image_m87_pol",
    "image_multifreq",
    "ImageGrid",
    "is_real_float_array",
    "JonesCorrected",
    "JonesGainPrior",
    "L1",
    "Laplace",
    "laplace",
    "laplace_evidence",
    "LBFGS",
    "LeastSquaresState",
    "LevenbergMarquardt",
    "load_fits",
    "load_uvfits",
    "log_closure_amplitudes",
    "LogClosureAmpChi2",
    "LogClosureAmpProducts",
    "m87_systematic_noise",
    "make_forward",
    "MRing",
    "MultiBandData",
    "MultiFrequencyImage",
    "n_rows_leaf",
    "NUFFT",
    "Objective",
    "observe",
    "observe_same",
    "ObjectiveFunction",
    "OptaxSolver",
    "OptaxState",
    "pad_and_stack",
    "pad_to_match",
    "ParameterPrior",
    "PixelImage",
    "PolGaussianImage",
    "PolMRingImage",
    "PolPixelImage",
    "PolSphericalImage",
    "plot_amplitudes",
    "plot_closure_phase_residuals",
    "plot_dterms",
    "plot_image",
    "plot_images",
    "plot_pol_residuals",
    "plot_polarization",
    "plot_uv_coverage",
    "pol_residuals",
    "PolVisData",
    "PolVisChi2",
    "PolEntropy",
    "PolTV",
    "polarization_summary",
    "ring_center",
    "Posterior",
    "RAD_PER_DEG",
    "RAD_PER_UAS",
    "rad_to_uas",
    "rescale_zero_baseline",
    "RescaledPolPixels",
    "residual_jacobian",
    "RESULTS",
    "reverse_taper",
    "RingImage",
    "Rotated",
    "sample",
    "Samples",
    "save_fits",
    "save_uvfits",
    "self_calibrate",
    "leakage_calibrate",
    "polgains_calibrate",
    "RLGainTable",
    "SeparableFT",
    "ShardedChi2",
    "BandShardedChi2",
    "shard_bands",
    "ShardedForward",
    "sharded_parts",
    "Shifted",
    "SimpleEntropy",
    "SimplexImage",
    "Solution",
    "solution_intervals",
    "solve",
    "solve_scipy",
    "SolverOptions",
    "SpectralL2",
    "SpectralTV",
    "StationJones",
    "stop_test",
    "StationGains",
    "StationTable",
    "StokesVChi2",
    "StokesVFlux",
    "StokesVL1",
    "StokesVL2",
    "StokesVTSV",
    "StokesVTV",
    "Stretched",
    "Sum",
    "survey",
    "SurveyResult",
    "taper",
    "thermal_sigma",
    "TrianglePulse",
    "TSV",
    "TV",
    "uas_to_rad",
    "unconstrained_parameters",
    "uv_tracks",
    "VisChi2",
    "VisData",
    "WeightedL1",
    "with_gains",
    "WithGains",
    "to_arviz",
    "image_summary",
    "ImageSummary",
    "closure_ppc",
    "ClosurePPC",
    "plot_corner",
    "plot_image_summary",
    "plot_ppc",
    "plot_trace",
    "XSRingauss",
    "AbstractPolGeometricModel",
    "PolMRing",
    "Polarized",
]
