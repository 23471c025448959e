"""Storage in InfluxDB: points, the v1 HTTP client, and evidence read back."""
