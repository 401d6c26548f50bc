"""What operators see: Prometheus metrics, the access log, redaction and throttled logging."""
