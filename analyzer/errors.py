"""The analyzer package's small exception hierarchy."""


class AnalyzerError(Exception):
    """Base class for every error the analyzer raises on purpose."""


class ServiceError(AnalyzerError):
    """A local service (Mosquitto, InfluxDB) is missing or would not start."""


class InfluxUnavailable(AnalyzerError):
    """InfluxDB could not be reached or answered 5xx: retry later, nothing was stored."""


class InfluxRejected(AnalyzerError):
    """InfluxDB refused the data (4xx): retrying the same lines cannot succeed."""


class ProvisioningError(AnalyzerError):
    """A deployment file (CA, certificate, password file, device bundle) cannot be made."""
