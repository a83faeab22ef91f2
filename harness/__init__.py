"""What the tests and the bench both run against: the services of one run (its database and
virtual host), real `ltm` processes, waiting with a deadline, the fake Discord, the AMQP proxy,
broker taps, the world builder and its Discord-shaped ids.

Pytest fixtures stay in `tests/`; nothing here imports `tests` or pytest.
"""

__all__: list[str] = []
