"""Adapters of the worker: PostgreSQL, RabbitMQ, metrics."""
