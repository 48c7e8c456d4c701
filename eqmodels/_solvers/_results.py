"""Why a solve stopped: an enumeration, as Optimistix's `RESULTS`."""

import equinox as eqx
from jaxtyping import Array, Int


class RESULTS(eqx.Enumeration):
    """Why a solve stopped ([`eqmodels.Solution`][]'s `result`).

    Compare with `==` (`sol.result == em.RESULTS.gtol`, an array under `vmap`);
    `Solution.reason` gives the name as text. The members, in this order (their
    integer values 0–4, as saved in survey checkpoints):

    - `max_steps`: the step limit was reached (not a failure).
    - `gtol`: the largest gradient component fell to `gtol` (converged).
    - `ftol`: the relative decrease fell to `ftol` (converged).
    - `nonfinite`: the objective or its gradient is NaN/inf (a failure).
    - `linesearch`: no decrease along the search direction within the line-search
      budget, or a damping grown past what changes the step (a failure).
    """

    max_steps = "max_steps: the step limit was reached"
    gtol = "gtol: the largest gradient component is at most `gtol`"
    ftol = "ftol: the relative decrease is at most `ftol`"
    nonfinite = "nonfinite: the objective or its gradient is not finite"
    linesearch = "linesearch: no decrease was found along the search direction"


#: The names of the members of `RESULTS`, by value.
REASONS = ("max_steps", "gtol", "ftol", "nonfinite", "linesearch")


def as_result(code: Int[Array, "*batch"]) -> RESULTS:
    """The `RESULTS` member of an integer stop code (`RUNNING`, -1, reads as
    `max_steps`: a loop that stopped while running hit its step limit)."""
    out = RESULTS.max_steps
    for name in REASONS[1:]:
        member = getattr(RESULTS, name)
        out = RESULTS.where(code == REASONS.index(name), member, out)
    return out


def failed(result: RESULTS):
    """Whether `result` is a failure (`nonfinite` or `linesearch`); `max_steps` is
    not one."""
    return (result == RESULTS.nonfinite) | (result == RESULTS.linesearch)
