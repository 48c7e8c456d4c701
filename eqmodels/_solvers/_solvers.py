"""The solver modules: what one minimisation step does.

Gradient solvers ([`eqmodels.LBFGS`][], [`eqmodels.Adam`][],
[`eqmodels.OptaxSolver`][]) say which optax transformation to run; least-squares
solvers ([`eqmodels.GaussNewton`][], [`eqmodels.LevenbergMarquardt`][]) work on the
objective's residuals and their chunked Jacobian. The loop itself lives in
[`eqmodels.solve`][].
"""

import abc
from typing import Literal

import equinox as eqx
import numpy as np
import optax
from jaxtyping import Array, ArrayLike, Float

from .._validation import scalar_leaf
from ._jacobian import check_chunk_size, check_memory_budget, DEFAULT_MEMORY_BUDGET


class AbstractSolver(eqx.Module):
    """Base class of the solvers accepted by [`eqmodels.solve`][] and
    [`eqmodels.survey`][]. Subclass [`eqmodels.AbstractGradientSolver`][] (any optax
    transformation) or [`eqmodels.AbstractLeastSquaresSolver`][]."""


class AbstractGradientSolver(AbstractSolver):
    """A solver that runs an optax transformation on the objective's gradient.

    Subclasses implement `transformation()`, called *inside* the compiled program:
    array fields (a learning rate) stay traced, so changing them does not recompile.
    When the transformation's state stores the line search's `value` and `grad`
    (optax L-BFGS, `store_grad=True` backtracking), the loop reuses them instead of
    evaluating the objective again.
    """

    @abc.abstractmethod
    def transformation(self) -> optax.GradientTransformation:
        """**Returns:** the optax transformation one step applies."""


def _positive_int(name, value, minimum=1):
    if (
        isinstance(value, bool)
        or not isinstance(value, int | np.integer)
        or value < minimum
    ):
        raise ValueError(f"`{name}` must be an int ≥ {minimum}, got {value!r}.")
    return int(value)


def _real(name, value, *, low=0.0, high=None, low_open=False, high_open=True):
    """`value` as a float, checked to be a real number in the interval from `low` to
    `high` (open or closed at each end; `high=None`: no upper bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        raise TypeError(f"`{name}` must be a real number, got {value!r}.")
    v = float(value)
    above = v > low if low_open else v >= low
    below = high is None or (v < high if high_open else v <= high)
    if not (np.isfinite(v) and above and below):
        lo = f"{'(' if low_open else '['}{low:g}"
        hi = "inf)" if high is None else f"{high:g}{')' if high_open else ']'}"
        raise ValueError(
            f"`{name}` must be a finite number in {lo}, {hi}, got {value!r}."
        )
    return v


class LBFGS(AbstractGradientSolver):
    """Limited-memory BFGS (optax's `lbfgs`) with a line search whose value and
    gradient are reused by the next step (about one objective evaluation per
    iteration).

    `linesearch="backtracking"` (default) is an Armijo backtracking search with
    safeguarded quadratic interpolation, run as one flat loop of evaluations
    (eqmodels' own): the compiled program holds one copy of the objective, and
    under `vmap` every member advances on its own. `"zoom"` is optax's
    strong-Wolfe zoom search (`optax.lbfgs`): more robust on hard problems, 1.3–2×
    as long to compile, and under `vmap` a batch waits for its slowest
    member's search at every iteration. On the round-1 M87 objective both reach the
    same objective as scipy's L-BFGS-B to 0.2 % in 100 iterations (see
    `docs/solvers.md`).
    """

    memory_size: int = eqx.field(static=True)
    linesearch: Literal["zoom", "backtracking"] = eqx.field(static=True)
    max_linesearch_steps: int = eqx.field(static=True)

    def __init__(
        self,
        memory_size: int = 10,
        *,
        linesearch: str = "backtracking",
        max_linesearch_steps: int = 20,
    ):
        """**Arguments:**

        - `memory_size`: number of correction pairs kept (eht-imaging's scipy
          `maxcor` is 50; 10 is optax's default).
        - `linesearch`: `"backtracking"` or `"zoom"`.
        - `max_linesearch_steps`: evaluations a line search may take (scipy's
          `maxls`). The backtracking search allows at least 64 before its memory
          holds a pair: the first trial step has unit length in the parameters'
          own units, far too long for parameters in radians.
        """
        if linesearch not in ("zoom", "backtracking"):
            raise ValueError(
                f"`linesearch` must be 'zoom' or 'backtracking', got {linesearch!r}."
            )
        self.memory_size = _positive_int("memory_size", memory_size)
        self.linesearch = linesearch
        self.max_linesearch_steps = _positive_int(
            "max_linesearch_steps", max_linesearch_steps
        )

    def transformation(self) -> optax.GradientTransformation:
        if self.linesearch == "zoom":
            ls = optax.scale_by_zoom_linesearch(
                max_linesearch_steps=self.max_linesearch_steps
            )
        else:
            ls = optax.scale_by_backtracking_linesearch(
                max_backtracking_steps=self.max_linesearch_steps, store_grad=True
            )
        return optax.lbfgs(memory_size=self.memory_size, linesearch=ls)


class Adam(AbstractGradientSolver):
    """Adam (optax's `adam`). The learning rate is an array leaf: a new value does
    not recompile, and a survey can batch over it (one `Adam` per configuration)."""

    learning_rate: Float[Array, ""]
    b1: float = eqx.field(static=True)
    b2: float = eqx.field(static=True)

    def __init__(
        self,
        learning_rate: float | Float[ArrayLike, ""] = 1e-2,
        *,
        b1: float = 0.9,
        b2: float = 0.999,
    ):
        """**Arguments:**

        - `learning_rate`: step size (in the units of the parameters: for log
          pixels, 1e-2 changes a pixel by about 1 % per step).
        - `b1`, `b2`: decay rates of the moment estimates.
        """
        # A float leaf keeps its dtype (float32 stays float32); integers become floats.
        dtype = getattr(learning_rate, "dtype", None)
        self.learning_rate = scalar_leaf(
            "learning_rate",
            learning_rate,
            dtype if dtype is not None and np.issubdtype(dtype, np.floating) else None,
            positive=True,
        )
        self.b1 = _real("b1", b1, high=1.0)
        self.b2 = _real("b2", b2, high=1.0)

    def transformation(self) -> optax.GradientTransformation:
        return optax.adam(self.learning_rate, b1=self.b1, b2=self.b2)


class OptaxSolver(AbstractGradientSolver):
    """Any optax `GradientTransformation` (a chain, a schedule, `optax.lbfgs` with
    your own line search, ...).

    The transformation is static configuration: build it **once** and reuse the
    same object, since a new object (even an equal one) compiles a new program.
    Put hyperparameters you want to change without recompiling in an
    [`eqmodels.AbstractGradientSolver`][] subclass as array fields instead.
    """

    optimiser: optax.GradientTransformation = eqx.field(static=True)

    def __init__(self, optimiser: optax.GradientTransformation):
        """**Arguments:** `optimiser`, an `optax.GradientTransformation`."""
        if not isinstance(optimiser, optax.GradientTransformation):
            raise TypeError(
                "`optimiser` must be an optax.GradientTransformation (e.g. "
                f"`optax.adam(1e-2)`), got {type(optimiser).__name__}."
            )
        self.optimiser = optimiser

    def transformation(self) -> optax.GradientTransformation:
        return self.optimiser


class AbstractLeastSquaresSolver(AbstractSolver):
    """A solver on the residuals `r` of the objective (`J = Σ r²`) and their
    Jacobian, computed in chunks of `chunk_size` rows (or `"auto"`, the largest
    chunk within `memory_budget` bytes).

    The step solves the damped normal equations `(JᵀJ + λD²)δ = −Jᵀr`,
    `D² = diag(JᵀJ)` (Marquardt's scaling, so that parameters of very different
    scales are damped alike), in whichever space is smaller: over the n parameters,
    or, when there are fewer residuals than parameters, over the m residuals (the
    same step through one m×m Cholesky factorisation).

    The step rules are [`eqmodels.GaussNewton`][] and
    [`eqmodels.LevenbergMarquardt`][]; `solve` refuses other subclasses (the loop
    has no hook for a third rule).
    """

    chunk_size: eqx.AbstractVar[int | str]
    memory_budget: eqx.AbstractVar[float]


def _check_ls(chunk_size, memory_budget):
    check_chunk_size(chunk_size)
    check_memory_budget(memory_budget)
    return chunk_size if isinstance(chunk_size, str) else int(chunk_size)


class GaussNewton(AbstractLeastSquaresSolver):
    """Gauss-Newton: the full least-squares step `δ` (`J δ ≈ −r`), without
    globalisation. When the problem is underdetermined (fewer residuals than
    parameters) it is the step of least `‖D δ‖` with Marquardt's scaling
    `D² = diag(JᵀJ)` (tiny `jitter` damping) — the minimum-norm step `−J⁺r` only
    when the columns of `J` have equal norms. It solves a linear least-squares
    problem in one step; on nonlinear ones prefer
    [`eqmodels.LevenbergMarquardt`][]. Every term must have residuals (data
    terms do; entropy and TV do not)."""

    chunk_size: int | str = eqx.field(static=True)
    memory_budget: int | float = eqx.field(static=True)
    jitter: float = eqx.field(static=True)

    def __init__(
        self,
        *,
        chunk_size: int | str = "auto",
        memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
        jitter: int | float = 1e-12,
    ):
        """**Arguments:**

        - `chunk_size`: Jacobian rows (or columns) computed together, or `"auto"`.
        - `memory_budget`: bytes one Jacobian chunk may use (`"auto"`).
        - `jitter`: relative regularisation of the normal matrix (`λ = jitter`
          against its unit-scaled diagonal), so that rank-deficient problems stay
          finite.
        """
        self.chunk_size = _check_ls(chunk_size, memory_budget)
        self.memory_budget = float(memory_budget)
        self.jitter = _real("jitter", jitter)


class LevenbergMarquardt(AbstractLeastSquaresSolver):
    """Levenberg-Marquardt: Gauss-Newton steps damped by `λ·diag(JᵀJ)`, `λ` adapted by the
    ratio of actual to predicted reduction (Nielsen's rule: shrink on a good step,
    double the growth factor after each rejected one). Every term must have
    residuals."""

    chunk_size: int | str = eqx.field(static=True)
    memory_budget: int | float = eqx.field(static=True)
    damping: float = eqx.field(static=True)

    def __init__(
        self,
        *,
        chunk_size: int | str = "auto",
        memory_budget: int | float = DEFAULT_MEMORY_BUDGET,
        damping: int | float = 1e-3,
    ):
        """**Arguments:**

        - `chunk_size`, `memory_budget`: as for [`eqmodels.GaussNewton`][].
        - `damping`: the initial `λ` (relative to `diag(JᵀJ)`).
        """
        self.chunk_size = _check_ls(chunk_size, memory_budget)
        self.memory_budget = float(memory_budget)
        self.damping = _real("damping", damping, low_open=True)


_NAMED = {
    "lbfgs": lambda: LBFGS(),
    "lbfgs-zoom": lambda: LBFGS(linesearch="zoom"),
    "adam": lambda: Adam(),
    "gauss-newton": lambda: GaussNewton(),
    "levenberg-marquardt": lambda: LevenbergMarquardt(),
}


def as_solver(solver) -> AbstractSolver:
    """A solver module from a solver, a name or an optax transformation."""
    if isinstance(solver, AbstractSolver):
        if not isinstance(solver, AbstractGradientSolver | AbstractLeastSquaresSolver):
            raise TypeError(
                f"`solver` {type(solver).__name__} subclasses AbstractSolver "
                "directly: subclass AbstractGradientSolver (an optax "
                "transformation) or AbstractLeastSquaresSolver instead."
            )
        if isinstance(solver, AbstractLeastSquaresSolver) and not isinstance(
            solver, GaussNewton | LevenbergMarquardt
        ):
            # The least-squares loop has no hook for another step rule: a
            # subclass ran as Gauss-Newton without saying so (from a review).
            raise TypeError(
                f"`solver` {type(solver).__name__} subclasses "
                "AbstractLeastSquaresSolver, whose step rules are GaussNewton and "
                "LevenbergMarquardt only: use one of those (with your "
                "`chunk_size` / `memory_budget`), or subclass "
                "AbstractGradientSolver for a step of your own."
            )
        return solver
    if isinstance(solver, str):
        if solver not in _NAMED:
            raise ValueError(
                f"`solver` must be one of {sorted(_NAMED)}, a solver module or an "
                f"optax.GradientTransformation, got {solver!r}."
            )
        return _NAMED[solver]()
    if isinstance(solver, optax.GradientTransformation):
        return OptaxSolver(solver)
    raise TypeError(
        "`solver` must be a name ('lbfgs', 'adam', ...), an eqmodels solver module "
        f"or an optax.GradientTransformation, got {type(solver).__name__}."
    )
