"""Barkwatch sensor node: capture, calibrated levels and features, durable outbox, MQTT.

The wire format (:mod:`sensor.wire`) lives here because the producer owns it; the
analyzer imports it.
"""

import os

__version__ = "0.1.0"

# onnxruntime (YAMNet, sensor.yamnet_network) builds for Linux include 1DS telemetry that
# initialises when the library loads: a device identifier and session file in $TMPDIR
# (".ses") and an uploader. A device at a private address sends nothing it was not asked to
# (issue 24, privacy first): opted out for the whole process before any import of it, unless
# the operator set the variable. ORT_DISABLE_TELEMETRY=1 is onnxruntime's documented opt-out.
os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
