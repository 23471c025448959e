"""Fault injection: real services and processes killed at seeded random moments (issue 23)."""
