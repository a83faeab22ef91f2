"""The worker: runs the memory tools' calls (`worker.tools`) against PostgreSQL, from RabbitMQ."""
