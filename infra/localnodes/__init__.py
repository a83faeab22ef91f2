"""Broker nodes and database instances of our own on this machine, started from Python."""
