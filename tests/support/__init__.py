"""Helpers shared by the tests: the services of one test run, seeding, waiting on conditions."""
