"""What only the tests use: pytest fixtures (local nodes, broker accounts, database roles) and
test-only helpers. What the bench uses too (services, processes, waiting, the world builder,
the fake Discord, the AMQP proxy) is in the `harness` package."""
