"""Solvers: on-device minimisation, surveys, chunked Jacobians, the
compilation cache."""
