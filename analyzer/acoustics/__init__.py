"""Acoustics of a site: the installation record, propagation to 100 ft, audibility."""
