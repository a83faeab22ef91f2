"""The worker: runs `update_long_term_memory` tool calls against PostgreSQL, from RabbitMQ."""
