"""Complexity routing: explainable prompt features and exemplar votes make a score in [0, 1]."""
