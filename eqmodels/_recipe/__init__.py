"""Recipes: complete imaging pipelines built from the package's public parts."""
