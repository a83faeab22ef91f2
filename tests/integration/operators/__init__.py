"""The operators' tools on the real broker: dead-letter queue and audit stream."""
