"""The state file: what was started under a folder, so that another process can stop exactly it.

One JSON file, `localnodes.json`, in the base folder. Each part (the broker cluster, the
PostgreSQL pair) records itself before it starts anything, so that a start cut short is still
found and stopped by `python -m harness.localnodes down`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["STATE_FILE", "forget", "recorded", "remember"]

STATE_FILE = "localnodes.json"


def recorded(base_dir: Path) -> dict[str, Any]:
    """Every part recorded under `base_dir`, by name; empty when nothing is."""
    path = base_dir / STATE_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return {}
    state: Any = json.loads(text)
    if not isinstance(state, dict):
        raise ValueError(f"{path} does not hold a state object")
    return state


def _write(base_dir: Path, state: dict[str, Any]) -> None:
    path = base_dir / STATE_FILE
    if not state:
        path.unlink(missing_ok=True)
        return
    # Written whole then renamed: a reader never sees half a file.
    draft = path.with_suffix(".json.tmp")
    draft.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(draft, path)


def remember(base_dir: Path, part: str, description: dict[str, Any]) -> None:
    state = recorded(base_dir)
    state[part] = description
    _write(base_dir, state)


def forget(base_dir: Path, part: str) -> None:
    state = recorded(base_dir)
    state.pop(part, None)
    _write(base_dir, state)
