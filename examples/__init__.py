"""Examples of using the service: call files, the demo data, and a bot (`examples.bot`)."""
