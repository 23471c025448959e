"""Acoustics of a site: the installation record, propagation to 100 ft, audibility."""

from __future__ import annotations

from analyzer.acoustics.audibility import (
    BAND_INDICES,
    AudibilityAssessor,
    AudibilitySettings,
    Background,
    EventAudibility,
    parameters,
)
from analyzer.acoustics.site import InstallationRecord, load_site, site_template

__all__ = [
    "AudibilityAssessor",
    "AudibilitySettings",
    "BAND_INDICES",
    "Background",
    "EventAudibility",
    "InstallationRecord",
    "load_site",
    "parameters",
    "site_template",
]
