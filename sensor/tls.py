"""The client's TLS context: trusts only the deployment's CA, always verifies the broker.

Shared by the publisher (connecting) and the configuration check (``validate-config``), so
both refuse the same CA file.
"""

from __future__ import annotations

import ssl

from sensor.errors import ConfigError


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A client TLS context that trusts only ``ca_file`` and checks the broker's host name.

    TLS 1.2 at least; certificate and host name are always verified (there is no way to turn
    that off). Raise ConfigError when the CA file cannot be loaded.
    """
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"config key 'mqtt.tls_ca': cannot load CA certificate {ca_file}: {exc}"
        ) from exc
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
