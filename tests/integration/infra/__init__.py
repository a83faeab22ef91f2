"""`make run`'s parts on real processes and the real database: the supervisor, the demo data."""
