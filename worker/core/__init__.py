"""The tools' decisions: pure functions over the call and the facts loaded for it, no I/O."""
