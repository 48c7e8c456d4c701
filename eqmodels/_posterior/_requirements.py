"""What the sampling functions (`sample`, its VI methods, `evidence`) check first:
blackjax importable, and a `Posterior` given."""

from ._posterior import Posterior


def import_blackjax(what: str):
    """`blackjax`, or an `ImportError` saying how to install it (`what`: the
    function that needs it, for the message)."""
    try:
        import blackjax
    except ImportError as e:
        raise ImportError(
            f"`{what}` needs blackjax: `pip install blackjax` (or the "
            "`eqmodels[posterior]` extra)."
        ) from e
    return blackjax


def check_posterior(posterior) -> None:
    """A `TypeError` unless `posterior` is an [`eqmodels.Posterior`][]."""
    if not isinstance(posterior, Posterior):
        raise TypeError(
            f"`posterior` must be an eqmodels.Posterior, got {type(posterior).__name__}."
        )
