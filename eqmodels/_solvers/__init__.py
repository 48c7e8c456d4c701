"""Solvers (issue 9): on-device minimisation, surveys, chunked Jacobians, the
compilation cache."""
