"""Posteriors: log densities of data terms plus priors, NUTS sampling (blackjax) and
the Laplace approximation."""
