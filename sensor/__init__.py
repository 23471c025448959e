"""Barkwatch sensor node: capture, calibrated levels and features, durable outbox, MQTT.

The wire format (:mod:`sensor.wire`) lives here because the producer owns it; the
analyzer imports it.
"""

__version__ = "0.1.0"
