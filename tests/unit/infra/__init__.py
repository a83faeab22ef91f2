"""The infrastructure helpers on their own: logging."""
