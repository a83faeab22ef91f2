"""Unit tests of the shared contract package."""
