"""Deployment: the CA, broker passwords, broker and device provisioning, local services."""
