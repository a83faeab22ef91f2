"""The repository documents itself: nothing refers to a specification kept outside it, every
relative link of the documentation leads to a file (and heading) that exists, the README stays
short and begins with the commands CI runs, and the facts the code owns (the settings, the
statuses) are the ones the pages show."""

from __future__ import annotations

import ast
import os
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path
from typing import Final
from urllib.parse import unquote

import pytest

from contracts import MemoryStatus
from infra.observability.tracing_sampler import DEFAULT_SAMPLER, DEFAULT_SAMPLER_RATIO
from infra.settings import Settings, environment_variable
from infra.settings_table import BEGIN_MARKER, END_MARKER, settings_table, with_settings_table

ROOT: Final = Path(__file__).resolve().parents[2]
DOCS: Final = ROOT / "docs"
README: Final = ROOT / "README.md"
DOCUMENTATION: Final = (README, *sorted(DOCS.glob("*.md")), ROOT / "bench" / "RESULTS.md")
# The README is the newcomer's page: what the service is, its first commands, a short walk.
README_MOST_LINES: Final = 200

# Version control, the virtualenv and what tools generate: not the repository's own text.
_SKIPPED_DIRECTORIES: Final = frozenset(
    {
        ".git",
        ".venv",
        "__pycache__",
        ".mypy_cache",
        ".ruff_cache",
        ".pytest_cache",
        ".hypothesis",
        ".cluster",
        "build",
        "dist",
    }
)

# The names of the specification files this project was once described by, and the folder
# beside the repository they lived in. Written with a bracket so that this file does not
# match itself. The names that are words of their own (a constant may be called FACTS) count
# only with their `.md`.
_OUTSIDE_REFERENCE: Final = re.compile(
    r"\b(?:[B]EHAVIOUR|[A]RCHITECTURE|[L]IFECYCLE)\b"
    r"|\b(?:[C]ONTRACT|[S]ECURITY|[F]ACTS)\.md\b"
    r"|\.\./[s]hared\b"
    r"|/[w]ork/shared\b"
)

_FENCED_BLOCK: Final = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_INLINE_CODE: Final = re.compile(r"`[^`\n]*`")
_LINK: Final = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_HEADING: Final = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)
_DOCS_PAGE: Final = re.compile(r"\bdocs/([A-Za-z0-9_-]+\.md)\b")


def _repository_files() -> Iterator[Path]:
    for folder, directories, files in os.walk(ROOT):
        # Pruned in place, so that the walk does not descend into them at all.
        directories[:] = sorted(
            name
            for name in directories
            if name not in _SKIPPED_DIRECTORIES and not name.endswith(".egg-info")
        )
        for name in sorted(files):
            if name not in _SKIPPED_DIRECTORIES:  # a worktree's `.git` is a file
                yield Path(folder, name)


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None  # not text


def _prose(markdown: str) -> str:
    """The Markdown without code: links and headings in code are examples, not links."""
    return _INLINE_CODE.sub("", _FENCED_BLOCK.sub("", markdown))


def _anchor(heading: str) -> str:
    """The anchor a heading gets on GitHub: lower case, punctuation dropped, spaces as `-`."""
    text = _INLINE_CODE.sub(lambda match: match.group(0).strip("`"), heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    kept = "".join(
        character
        for character in text.lower()
        if character in " -_" or unicodedata.category(character)[0] in "LN"
    )
    return kept.replace(" ", "-")


def _anchors(markdown: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in _HEADING.findall(_FENCED_BLOCK.sub("", markdown)):
        anchor = _anchor(heading)
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def _relative_links(page: Path) -> Iterator[str]:
    for target in _LINK.findall(_prose(page.read_text(encoding="utf-8"))):
        if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:…
            yield target


def test_the_documentation_pages_exist() -> None:
    names = {page.name for page in DOCUMENTATION if page.parent == DOCS}
    assert names >= {
        "README.md",
        "behaviour.md",
        "contract.md",
        "architecture.md",
        "operations.md",
        "security.md",
        "development.md",
    }


def test_nothing_refers_to_a_specification_outside_the_repository() -> None:
    offenders = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if _OUTSIDE_REFERENCE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_the_check_recognizes_a_reference_outside() -> None:
    # The names are put together here, so that this file itself stays clean.
    references = (
        "BEHAV" + "IOUR",
        "CONTRACT" + ".md",
        "see LIFE" + "CYCLE.md §1",
        "FACTS" + ".md",
        "../" + "shared",
    )
    for reference in references:
        assert _OUTSIDE_REFERENCE.search(reference), reference
    own_words = ("docs/behaviour.md", "docs/contract.md", "architecture.md#the-flow", "FACTS: 8")
    for own in own_words:
        assert not _OUTSIDE_REFERENCE.search(own), own


@pytest.mark.parametrize("page", DOCUMENTATION, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    broken = []
    for target in _relative_links(page):
        path_part, _, fragment = target.partition("#")
        destination = (page.parent / unquote(path_part)).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file")
            continue
        anchors = (
            _anchors(destination.read_text(encoding="utf-8"))
            if destination.suffix == ".md"
            else None
        )
        if fragment and anchors is not None and unquote(fragment) not in anchors:
            broken.append(f"{target}: no such heading")
    assert not broken, "\n".join(broken)


def test_every_docs_page_named_in_the_repository_exists() -> None:
    missing = []
    for path in _repository_files():
        text = _text(path)
        if text is None:
            continue
        for name in _DOCS_PAGE.findall(text):
            if not (DOCS / name).is_file():
                missing.append(f"{path.relative_to(ROOT)}: docs/{name}")
    assert not missing, "\n".join(missing)


def test_anchors_are_made_as_github_makes_them() -> None:
    assert _anchor("`tool_call.requested`") == "tool_callrequested"
    assert _anchor("Where a message is acked, nacked or dead-lettered") == (
        "where-a-message-is-acked-nacked-or-dead-lettered"
    )
    assert _anchor("`memory.*` audit events") == "memory-audit-events"
    assert _anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


def test_the_readme_is_short() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MOST_LINES, f"README.md has {len(lines)} lines"


def _first_commands(markdown: str) -> list[str]:
    """The commands of the page's first fenced block, comments dropped."""
    block = _FENCED_BLOCK.search(markdown)
    assert block, "no fenced block"
    body = block.group(0).splitlines()[1:-1]
    return [line.split("#", 1)[0].strip() for line in body if line.split("#", 1)[0].strip()]


def test_the_readme_begins_with_the_commands_ci_runs() -> None:
    # CI runs "the README's test command": the first two commands are the newcomer's and CI's.
    assert _first_commands(README.read_text(encoding="utf-8"))[:2] == ["make run", "make test"]
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert "make test" in (line.strip() for line in ci)


def test_the_settings_table_is_the_settings() -> None:
    page = (DOCS / "contract.md").read_text(encoding="utf-8")
    assert page.count(BEGIN_MARKER) == 1 and page.count(END_MARKER) == 1
    assert with_settings_table(page) == page, "docs/contract.md's settings: run `make docs`"


def test_every_setting_has_a_row_and_a_description() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert field.description, f"Settings.{name} has no description"
        assert f"| `{environment_variable(name, field)}` |" in table


def test_the_settings_table_is_replaced_in_place() -> None:
    page = f"before\n{BEGIN_MARKER}\n| stale |\n{END_MARKER}\nafter\n"
    rendered = with_settings_table(page)
    assert rendered.startswith(f"before\n{BEGIN_MARKER}\n| variable |")
    assert rendered.endswith(f"|\n{END_MARKER}\nafter\n")
    assert "stale" not in rendered
    with pytest.raises(ValueError, match="markers"):
        with_settings_table("no markers here")


# Variables the pages may name that are not settings: crash tests, the Kubernetes secrets
# script, the console's screenshots.
_OTHER_VARIABLES: Final = re.compile(r"^LTM_(?:FAILPOINTS|K8S_\w+|SCREENSHOTS|TEST\w*)$")
_VARIABLE: Final = re.compile(r"\bLTM_[A-Z0-9_]*[A-Z0-9]\b")


def test_every_variable_the_pages_name_is_a_setting() -> None:
    known = {environment_variable(name, field) for name, field in Settings.model_fields.items()}
    unknown = []
    for page in DOCUMENTATION:
        for variable in set(_VARIABLE.findall(page.read_text(encoding="utf-8"))):
            setting = variable if variable in known else variable.removesuffix("_FILE")
            if setting not in known and not _OTHER_VARIABLES.match(variable):
                unknown.append(f"{page.relative_to(ROOT)}: {variable}")
    assert not unknown, "\n".join(sorted(unknown))


def test_every_status_is_described() -> None:
    behaviour = (DOCS / "behaviour.md").read_text(encoding="utf-8")
    missing = [status.value for status in MemoryStatus if f"`{status.value}`" not in behaviour]
    assert not missing, missing


@pytest.mark.parametrize("page", ["operations.md", "contract.md"])
def test_the_default_sampling_the_pages_state_is_the_code_s(page: str) -> None:
    text = " ".join((DOCS / page).read_text(encoding="utf-8").split())
    assert f"`{DEFAULT_SAMPLER}` at {DEFAULT_SAMPLER_RATIO}" in text


def test_the_architecture_says_where_things_happen() -> None:
    anchors = _anchors((DOCS / "architecture.md").read_text(encoding="utf-8"))
    assert anchors >= {
        "where-things-happen",
        "where-each-status-is-decided",
        "where-each-row-is-written",
        "where-each-event-leaves",
        "where-a-message-is-acked-nacked-or-dead-lettered",
    }


# What a backticked span names. A repository path: no spaces, at least one `/` or the `.py`
# of a module (a bare `pg_hba.conf` is the server's file, not the checkout's). A reference: a
# module's path, a colon, and a top-level name or a class's attribute.
_CODE_SPAN: Final = re.compile(r"`([^`\n]+)`")
_PATH: Final = re.compile(r"^[\w.-]+(?:/[\w.-]+)*/?$")
_REFERENCE: Final = re.compile(
    r"^(?P<path>[\w./-]+\.py): (?P<name>[A-Za-z_]\w*)(?:\.(?P<attribute>[A-Za-z_]\w*))?$"
)
# Spans shaped like paths that are not the repository's, each with why.
_NOT_REPOSITORY_PATHS: Final = {
    "application/json": "a MIME type",
    "http/protobuf": "an OTLP protocol name",
}
# Folders that tools write into a checkout, git-ignored: the pages name them and their files.
_GENERATED_FOLDERS: Final = {
    ".cluster/": "harness/localnodes's nodes and their state, once started",
    "deploy/k8s/secrets.sh-output/": "what deploy/k8s/secrets.sh writes, passwords and URLs",
}


def _code_spans(markdown: str) -> Iterator[str]:
    """The inline code of the page's prose; fenced blocks are commands and examples."""
    for span in _CODE_SPAN.findall(_FENCED_BLOCK.sub("", markdown)):
        yield span.strip()


def _is_repository_path(span: str) -> bool:
    if span in _NOT_REPOSITORY_PATHS or span.startswith(("/", "~")):
        return False  # absolute: a URL path or the machine's, not the checkout's
    if any(f"{span}/".startswith(folder) for folder in _GENERATED_FOLDERS):
        return False
    return bool(_PATH.match(span)) and ("/" in span or span.endswith(".py"))


def _checkout_paths() -> set[str]:
    """Every file and folder of the checkout, relative to it, folders ending in `/`."""
    paths: set[str] = set()
    for path in _repository_files():
        relative = path.relative_to(ROOT)
        paths.add(relative.as_posix())
        paths.update(f"{parent.as_posix()}/" for parent in relative.parents if parent.parts)
    return paths


def _resolve(span: str, checkout: set[str]) -> list[str]:
    """The checkout's paths a span can mean. One that begins with a top-level entry is named
    from the root; any other is named inside the folder its sentence is about (`tools/`,
    `inbox.py`), and means each path that ends with it."""
    wanted = span if span.endswith("/") or f"{span}/" not in checkout else f"{span}/"
    if span.split("/", 1)[0] in {path.split("/", 1)[0] for path in checkout if "/" in path}:
        return [wanted] if wanted in checkout else []
    return sorted(path for path in checkout if path == wanted or path.endswith(f"/{wanted}"))


def _defined_names(module: ast.Module) -> dict[str, set[str]]:
    """A module's top-level names, each with the attributes it defines when it is a class
    (its body's names and what its methods assign to `self`)."""
    names: dict[str, set[str]] = {}
    for statement in _statements(module.body):
        if isinstance(statement, ast.ClassDef):
            names[statement.name] = _class_attributes(statement)
        else:
            for name in _bound_names(statement):
                names.setdefault(name, set())
    return names


def _statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements of a body, through `if` and `try` (`if TYPE_CHECKING:`, fallbacks)."""
    for statement in body:
        if isinstance(statement, ast.If):
            yield from _statements(statement.body)
            yield from _statements(statement.orelse)
        elif isinstance(statement, ast.Try):
            for part in (statement.body, statement.orelse, statement.finalbody):
                yield from _statements(part)
            for handler in statement.handlers:
                yield from _statements(handler.body)
        else:
            yield statement


def _bound_names(statement: ast.stmt) -> Iterator[str]:
    if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        yield statement.name
    elif isinstance(statement, ast.Assign):
        for target in statement.targets:
            yield from _target_names(target)
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        yield from _target_names(statement.target)


def _target_names(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Name):
        yield target.id
    elif isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _target_names(element)


def _class_attributes(cls: ast.ClassDef) -> set[str]:
    attributes: set[str] = set()
    for statement in _statements(cls.body):
        attributes.update(_bound_names(statement))
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(statement):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.ctx, ast.Store)
                    and isinstance(node.value, ast.Name)
                    and node.value.id == "self"
                ):
                    attributes.add(node.attr)
    return attributes


def _missing_reference(span: str, checkout: set[str]) -> str | None:
    """Why a span that names repository code names nothing, or None when it names something."""
    reference = _REFERENCE.match(span)
    if reference is None:
        if not _is_repository_path(span):
            return None
        return None if _resolve(span, checkout) else "no such file or folder"
    modules = _resolve(reference["path"], checkout)
    if len(modules) != 1:
        return "no such module" if not modules else f"which module? {', '.join(modules)}"
    names = _defined_names(ast.parse((ROOT / modules[0]).read_text(encoding="utf-8")))
    name, attribute = reference["name"], reference["attribute"]
    if name not in names:
        return f"{modules[0]} defines no {name}"
    if attribute is not None and attribute not in names[name]:
        return f"{modules[0]}: {name} defines no {attribute}"
    return None


def _missing_references(markdown: str, checkout: set[str]) -> list[str]:
    return [
        f"`{span}`: {why}"
        for span in _code_spans(markdown)
        if (why := _missing_reference(span, checkout)) is not None
    ]


@pytest.mark.parametrize("page", DOCUMENTATION, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_code_reference_names_what_the_code_has(page: Path) -> None:
    missing = _missing_references(page.read_text(encoding="utf-8"), _checkout_paths())
    assert not missing, "\n".join(missing)


def test_the_reference_check_recognizes_what_is_missing() -> None:
    checkout = _checkout_paths()
    page = (
        "`worker/runtime/delivery.py`, `deploy/k8s/`, `tools/registry.py`, `inbox.py: CLAIM`,"
        " `worker/runtime/delivery.py: DeliveryHandler.handle`, `application/json`,"
        " `ltm/commands/<group>.py`, `http://localhost/x`, `/healthz`, `ltm memory list`,"
        " `deploy/k8s/secrets.sh-output/discord-token`, `.cluster/localnodes.json`"
    )
    assert _missing_references(page, checkout) == []
    gone = (
        "`worker/unit_of_work.py`",
        "`tests/unit/ltm/test_layout.py`",
        "`tool_call_transaction.py`",
        "`worker/runtime/delivery.py: DeliveryHandler._no_such_method`",
        "`worker/core/update.py: check_server_state`",
        "`outbox.py: NO_SUCH_STATEMENT`",
    )
    for span in gone:
        assert _missing_references(span, checkout), span
