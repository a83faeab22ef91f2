"""What `alembic check` leaves uncompared, compared: a check constraint's expression and a
partial index's WHERE clause, for those the database and `infra.storage.schema` both name.

Alembic compares an index's columns and (with its opt-in `checkconstraint_byname`) which check
constraints exist, not their expressions. These are compared as text, the metadata's written
as PostgreSQL shows them back (`pg_get_constraintdef`, `pg_get_expr`), white space and
enclosing parentheses aside: a difference is a drop and a re-create in Alembic's report.
Registered as the Alembic plugin `PLUGIN` on import; env.py names it.
"""

from __future__ import annotations

import re
import sys
from typing import Any, Final

from alembic.autogenerate.api import AutogenContext
from alembic.operations import ops
from alembic.runtime.plugins import Plugin
from alembic.util import PriorityDispatchResult
from sqlalchemy import CheckConstraint, ClauseElement, Table

__all__ = ["PLUGIN", "setup"]

PLUGIN: Final = "infra.storage.expressions"


def _normalized(expression: str) -> str:
    """`expression` on one line, without parentheses that enclose all of it."""
    text = re.sub(r"\s+", " ", expression).strip()
    while text.startswith("(") and text.endswith(")") and _encloses(text):
        text = text[1:-1].strip()
    return text


def _encloses(text: str) -> bool:
    """Whether the first parenthesis of `text` closes at its last character."""
    depth = 0
    for position, character in enumerate(text):
        depth += {"(": 1, ")": -1}.get(character, 0)
        if depth == 0:
            return position == len(text) - 1
    return False


def _rendered(element: ClauseElement | str, context: AutogenContext) -> str:
    if isinstance(element, str):
        return element
    compiled = element.compile(
        dialect=context.dialect, compile_kwargs={"include_table": False, "literal_binds": True}
    )
    return str(compiled)


def _compare_check_expressions(  # noqa: PLR0917 - Alembic passes them by position
    context: AutogenContext,
    modify_ops: ops.ModifyTableOps,
    schema: str | None,
    table_name: str,
    conn_table: Table | None,
    metadata_table: Table | None,
) -> PriorityDispatchResult:
    if conn_table is None or metadata_table is None or context.inspector is None:
        return PriorityDispatchResult.CONTINUE
    reflected = {
        str(check["name"]): check["sqltext"]
        for check in context.inspector.get_check_constraints(table_name, schema=schema)
    }
    for constraint in metadata_table.constraints:
        if not isinstance(constraint, CheckConstraint) or constraint.name not in reflected:
            continue
        declared = _rendered(constraint.sqltext, context)
        if _normalized(declared) != _normalized(reflected[str(constraint.name)]):
            modify_ops.ops.append(ops.DropConstraintOp.from_constraint(constraint))
            modify_ops.ops.append(ops.AddConstraintOp.from_constraint(constraint))
    return PriorityDispatchResult.CONTINUE


def _compare_index_predicates(  # noqa: PLR0917 - Alembic passes them by position
    context: AutogenContext,
    modify_ops: ops.ModifyTableOps,
    schema: str | None,
    table_name: str,
    conn_table: Table | None,
    metadata_table: Table | None,
) -> PriorityDispatchResult:
    if conn_table is None or metadata_table is None or context.inspector is None:
        return PriorityDispatchResult.CONTINUE
    reflected: dict[str, Any] = {
        str(index["name"]): index.get("dialect_options", {}).get("postgresql_where")
        for index in context.inspector.get_indexes(table_name, schema=schema)
    }
    for index in metadata_table.indexes:
        if index.name not in reflected:
            continue  # Alembic reports a missing index itself
        declared = index.dialect_options["postgresql"]["where"]
        found = reflected[str(index.name)]
        if _predicate(declared, context) != _predicate(found, context):
            modify_ops.ops.append(ops.DropIndexOp.from_index(index))
            modify_ops.ops.append(ops.CreateIndexOp.from_index(index))
    return PriorityDispatchResult.CONTINUE


def _predicate(where: ClauseElement | str | None, context: AutogenContext) -> str | None:
    return None if where is None else _normalized(_rendered(where, context))


def setup(plugin: Plugin) -> None:
    """Alembic's plugin hook: both comparisons, on every table both sides have."""
    plugin.add_autogenerate_comparator(_compare_check_expressions, "table", "checkexpressions")
    plugin.add_autogenerate_comparator(_compare_index_predicates, "table", "indexpredicates")


Plugin.setup_plugin_from_module(sys.modules[__name__], PLUGIN)
