"""RabbitMQ: reaching the nodes, publishing with confirms, the topology, settling deliveries,
and the broker accounts of each role."""
