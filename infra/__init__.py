"""Settings, messaging, storage and observability: what every process of the service shares."""
