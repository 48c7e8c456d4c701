"""Solvers by name: what `solve` and `survey` accept as `solver`.

The solvers themselves: [`eqmodels.LBFGS`][] (`_lbfgs.py`), [`eqmodels.Adam`][] and
[`eqmodels.OptaxSolver`][] (`_optax.py`), [`eqmodels.GaussNewton`][] and
[`eqmodels.LevenbergMarquardt`][] (`_least_squares.py`), all implementations of
[`eqmodels.AbstractSolver`][] (`_base.py`) run by one loop.
"""

import optax

from ._base import AbstractSolver
from ._lbfgs import LBFGS
from ._least_squares import GaussNewton, LevenbergMarquardt
from ._optax import Adam, OptaxSolver


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
        f"(an `eqmodels.AbstractSolver`) or an optax.GradientTransformation, got "
        f"{type(solver).__name__}."
    )
