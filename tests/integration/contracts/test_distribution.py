"""tomori-ltm-contracts installs alone, with pydantic only, and bot shards can use it as such.

A fresh virtualenv gets `pip install contracts/` (dependencies resolved by pip, from its cache
where it has them); a probe run there decodes a tool call and finds nothing else of the project.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import contracts

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE_CALL = ROOT / "examples" / "first_call.json"

# Run with `python -I` in the virtualenv: neither the checkout nor PYTHONPATH is on its path.
PROBE = """
import importlib.metadata as metadata, importlib.resources as resources, importlib.util
import re, sys
import contracts
from contracts.asyncapi import build_document, render_yaml

assert contracts.__file__.startswith(sys.prefix), contracts.__file__
call = contracts.decode_tool_call(sys.stdin.buffer.read())
assert call.tool_name == "update_long_term_memory" and call.context.shard_id == 0, call
assert contracts.decode_tool_call(contracts.encode_event(call)) == call
assert build_document()["asyncapi"] == "3.0.0"
try:
    render_yaml()
except ImportError as missing:
    assert "tomori-ltm-contracts[asyncapi]" in str(missing), missing
else:
    raise AssertionError("render_yaml ran without PyYAML")
package = resources.files("contracts")
assert package.joinpath("py.typed").is_file() and package.joinpath("asyncapi.yaml").is_file()

def name(requirement):
    return re.split(r"[ ;<>=!~\\[(]", requirement, maxsplit=1)[0].lower().replace("_", "-")

# Everything the distribution needs, through pydantic's own requirements (extras left out).
needed, pending = set(), ["tomori-ltm-contracts"]
while pending:
    current = pending.pop()
    if current not in needed:
        needed.add(current)
        pending += [name(r) for r in metadata.requires(current) or () if "extra ==" not in r]
installed = {name(d.metadata["Name"]) for d in metadata.distributions()}
assert installed == needed, sorted(installed ^ needed)
assert [name(r) for r in metadata.requires("tomori-ltm-contracts") if "extra ==" not in r] == [
    "pydantic"
]
absent = ["worker", "gateway", "infra", "console", "ltm", "operators", "harness", "bench",
          "sqlalchemy", "aio_pika", "aiormq", "hikari", "psycopg", "yaml"]
found = [module for module in absent if importlib.util.find_spec(module) is not None]
assert not found, found
print("ok", contracts.__file__)
"""


def _example_body() -> bytes:
    payload = json.loads(EXAMPLE_CALL.read_text(encoding="utf-8"))
    envelope = {
        "event_id": str(uuid.uuid4()),
        "event_type": "tool_call.requested",
        "schema_version": contracts.SCHEMA_VERSION,
        "occurred_at": "2026-01-01T00:00:00Z",
    }
    return json.dumps(payload | envelope).encode()


def test_the_contracts_install_alone_and_decode_a_tool_call(tmp_path: Path) -> None:
    # A copy, so that the build leaves nothing in the checkout (setuptools builds in place).
    source = tmp_path / "source"
    shutil.copytree(
        ROOT / "contracts",
        source,
        ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"),
    )
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    environment["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    venv = tmp_path / "venv"
    # No pip of its own (quicker): this process's pip installs into it.
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=environment
    )
    python = str(venv / "bin" / "python")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--quiet", str(source)],
        check=True,
        cwd=tmp_path,
        env=environment,
    )

    probe = subprocess.run(
        [python, "-I", "-c", PROBE],
        check=False,
        input=_example_body(),
        capture_output=True,
        cwd=tmp_path,
        env=environment,
        timeout=60,
    )

    assert probe.returncode == 0, probe.stderr.decode()
    assert probe.stdout.decode().startswith(f"ok {venv}"), probe.stdout.decode()
