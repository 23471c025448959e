"""Deployment: the CA, broker passwords, broker and device provisioning, local services."""

from __future__ import annotations

from analyzer.deploy.pki import CA_DAYS, SERVER_DAYS
from analyzer.deploy.services import Services
from analyzer.files import owner_of

__all__ = ["CA_DAYS", "SERVER_DAYS", "Services", "owner_of"]
