"""Barkwatch analyzer: subscribe, validate, detect dog vocalizations, store evidence."""

__version__ = "0.1.0"
