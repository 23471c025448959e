"""The sensor's networks run without side effects outside the process: onnxruntime's telemetry
(a device identifier and session file in $TMPDIR, an uploader) stays off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_loading_both_networks_writes_nothing_to_the_temporary_folder(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ORT_DISABLE_TELEMETRY"}
    env["TMPDIR"] = str(tmp_path)
    code = ("import numpy as np; from sensor.scoring import SensorNetworks; "
            "n = SensorNetworks(48000); n.process(np.zeros(48000), np.zeros((50, 64))); "
            "import os; print(os.environ['ORT_DISABLE_TELEMETRY'])")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=120, check=True)
    assert done.stdout.strip() == "1"
    assert list(tmp_path.iterdir()) == []  # onnxruntime's ".ses" file without the opt-out
