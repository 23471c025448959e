"""Taking frames in: the MQTT service, plausibility, ordering, per-device live analysis."""
