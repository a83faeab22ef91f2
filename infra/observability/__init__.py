"""Structured logs, Prometheus metrics and OpenTelemetry tracing, shared by every process."""
