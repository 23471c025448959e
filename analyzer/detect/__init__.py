"""Detecting dog vocalizations in mel frames: the classifier, its scorer, event tracking."""
