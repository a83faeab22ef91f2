"""contracts/ is the tomori-ltm-contracts distribution: pydantic only, the service's version."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
CONTRACTS = ROOT / "contracts"


def _project(folder: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = tomllib.loads((folder / "pyproject.toml").read_text("utf-8"))
    return loaded


def test_the_service_depends_on_the_contracts_at_its_own_version() -> None:
    service, contracts = _project(ROOT), _project(CONTRACTS)
    assert contracts["project"]["name"] == "tomori-ltm-contracts"
    assert contracts["project"]["version"] == service["project"]["version"]
    pinned = f"tomori-ltm-contracts=={service['project']['version']}"
    assert pinned in service["project"]["dependencies"]
    # The service's wheel leaves the package to the contracts' distribution.
    included = service["tool"]["setuptools"]["packages"]["find"]["include"]
    assert not [pattern for pattern in included if pattern.startswith("contracts")]
    assert "contracts" not in service["tool"]["setuptools"]["package-data"]


def test_the_contracts_need_pydantic_only() -> None:
    project = _project(CONTRACTS)["project"]
    assert [requirement.split(">")[0] for requirement in project["dependencies"]] == ["pydantic"]
    assert project["optional-dependencies"] == {"asyncapi": ["pyyaml>=6,<7"]}


def test_the_package_is_the_folder_and_ships_its_data() -> None:
    setuptools = _project(CONTRACTS)["tool"]["setuptools"]
    assert setuptools["packages"] == ["contracts"]
    assert setuptools["package-dir"] == {"contracts": "."}
    shipped = setuptools["package-data"]["contracts"]
    assert {"py.typed", "asyncapi.yaml"} <= set(shipped)
    for name in shipped:
        assert (CONTRACTS / name).is_file(), name


def test_both_distributions_carry_the_mit_licence() -> None:
    for folder in (ROOT, CONTRACTS):
        project = _project(folder)["project"]
        assert project["license"] == "MIT", folder
        for name in project["license-files"]:
            assert (folder / name).read_bytes() == (ROOT / "LICENSE").read_bytes(), folder
    assert (ROOT / "LICENSE").read_text("utf-8").startswith("MIT License\n")
