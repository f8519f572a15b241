"""Hand-written SQL for the few statements every request and every agent turn runs.

The ORM builds and compiles each statement anew on every call: 0.3 to 1 ms
of CPU here, several times what the database spends running it. The hot
statements are written out instead, on Django's own connection (its
transactions, savepoints and pool), and values cross through the fields'
own adaptation: get_db_prep_save on the way in, the backend's and the
field's converters on the way out. A row read here is the instance the ORM
would have built, and a row written here the row it would have written.
Everything else stays with the ORM.

Statements are plain SQL that both PostgreSQL and SQLite (3.35 or later:
RETURNING) run; they are written with `%s` placeholders. On PostgreSQL they bind
their values on the server, unlike the ORM's (Django quotes values into the
text, since not all of its SQL can be prepared: ticket #20516). Values then
travel apart, unquoted, and psycopg prepares a statement that a connection
has run DB_PREPARE_THRESHOLD times (settings.py: Django turns preparing off
unless told), so the server no longer parses and plans it either. They go to
PostgreSQL already numbered ($1, $2, ...: `_numbered`, once per text), on
psycopg's RawCursor, which sends them as they are.
"""

import functools
import itertools
import json
import re
import sqlite3

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import DateTimeField, JSONField, Model


def _connection():
    # Once per call: every attribute read through django.db.connection is a thread-local lookup.
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def quote(name: str) -> str:
    # PostgreSQL and SQLite quote names alike.
    return _connection().ops.quote_name(name)


def table(model: type[Model]) -> str:
    return quote(model._meta.db_table)


@functools.cache
def _fields(model: type[Model], names: tuple[str, ...] | None) -> tuple:
    """The model's concrete fields, or those whose attname is in `names`, in the model's order."""
    fields = model._meta.concrete_fields
    return tuple(fields if names is None else (f for f in fields if f.attname in names))


@functools.cache
def columns(model: type[Model], alias: str, names: tuple[str, ...] | None = None) -> str:
    """The model's columns (those of the fields named by attname), in field order, for a SELECT list."""
    return ", ".join(f"{alias}.{quote(field.column)}" for field in _fields(model, names))


def width(model: type[Model], names: tuple[str, ...] | None = None) -> int:
    return len(_fields(model, names))


@functools.cache
def _converters(
    model: type[Model], names: tuple[str, ...] | None, vendor: str
) -> list[tuple[int, object, list]]:
    """(index, column expression, converters) of each selected field whose raw value needs converting."""
    connection = _connection()
    found = []
    for index, field in enumerate(_fields(model, names)):
        col = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        if isinstance(field, JSONField) and field.decoder is None:
            converters = [_json_value if c == field.from_db_value else c for c in converters]
        if converters:
            found.append((index, col, converters))
    return found


def _json_value(value, expression, connection):
    """JSONField.from_db_value for a plain column (no decoder): json_value()."""
    return json_value(value)


def json_value(value):
    """A plain JSON column's text, decoded as the ORM decodes it: {} and [] without json.loads.

    Most of a message's JSON columns (metadata, extensions, referenceTaskIds)
    hold {} or []: three of the four json.loads calls of each history message.
    Both databases spell them so (jsonb's text output, and json.dumps on
    SQLite). Each call returns containers of its own.
    """
    if value is None:
        return None
    if value == "{}":
        return {}
    if value == "[]":
        return []
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def json_values(values: list) -> list:
    """json_value() of each of many JSON column texts, decoded in one json.loads.

    For a page of history's parts: what json.loads cost per message was
    mostly its own per-call work, not the parsing. For the texts of a
    JSONField, which are JSON each: joined, they are one array of as many
    values. Should the joined text not parse, or give another count, they
    are decoded one at a time instead.
    """
    if None not in values:
        try:
            decoded = json.loads(f"[{','.join(values)}]")
        except json.JSONDecodeError:
            pass
        else:
            if len(decoded) == len(values):
                return decoded
    return [json_value(value) for value in values]


@functools.cache
def _pk_index(model: type[Model], names: tuple[str, ...] | None) -> int:
    return _fields(model, names).index(model._meta.pk)


@functools.cache
def _reading(model: type[Model], names: tuple[str, ...] | None, vendor: str) -> tuple:
    """(width, primary key index, _converters): what reading the columns needs."""
    return width(model, names), _pk_index(model, names), _converters(model, names, vendor)


def _values(connection, model: type[Model], row, start: int, names) -> list | None:
    """The field values at row[start:], converted as the ORM converts them (None: a NULL primary key)."""
    size, pk_index, converters = _reading(model, names, connection.vendor)
    values = list(row[start : start + size])
    if values[pk_index] is None:
        return None  # an outer join that found no row
    for index, col, column_converters in converters:
        value = values[index]
        for converter in column_converters:
            value = converter(value, col, connection)
        values[index] = value
    return values


def _hydrate(connection, model: type[Model], row, start: int, names=None) -> Model | None:
    values = _values(connection, model, row, start, names)
    if values is None:
        return None
    # With names, the fields left out are deferred, as QuerySet.only() leaves them.
    return model.from_db(connection.alias, names, values)


def hydrate(model: type[Model], row, start: int = 0, names: tuple[str, ...] | None = None) -> Model | None:
    """The model instance whose columns (as `columns()` lists them) begin at row[start].

    None if its primary key is NULL there: an outer join that found no row.
    """
    return _hydrate(_connection(), model, row, start, names)


def hydrate_all(row, *models: type[Model], start: int = 0) -> list[Model | None]:
    """One instance of each model, from a row that selected their `columns()` in turn from `start`."""
    connection = _connection()
    found = []
    for model in models:
        found.append(_hydrate(connection, model, row, start))
        start += width(model)
    return found


def _cursor(connection):
    """A Django cursor (query logging, error wrapping) for these statements: server-bound on PostgreSQL.

    On PostgreSQL the statement goes as `_numbered` writes it, not through
    psycopg's own conversion of %s placeholders: psycopg keeps a conversion
    only for a statement of at most 50 values and 4 kB, and converts any other
    anew on every run (a regular expression over the whole text). A batch of a
    turn's events has more values than that: its conversion was 11.6% of a
    worker's samples under load (py-spy, bench/README.md).
    """
    if connection.vendor != "postgresql":
        return connection.cursor()
    from django.db.backends.postgresql.base import TIMESTAMPTZ_OID
    from django.db.backends.postgresql.psycopg_any import register_tzloader
    from psycopg import RawCursor
    from psycopg.pq import Format

    # What connection.cursor() does, with a cursor class the ORM's SQL cannot use.
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    with connection.wrap_database_errors:
        raw = RawCursor(connection.connection)
        if (
            connection.connection.adapters.get_loader(TIMESTAMPTZ_OID, Format.TEXT).timezone
            != connection.timezone
        ):
            register_tzloader(connection.timezone, raw)
        return connection._prepare_cursor(raw)


_PLACEHOLDER = re.compile(r"%(.|$)", re.DOTALL)


@functools.lru_cache(maxsize=1024)
def _numbered(sql: str) -> str:
    """A statement's %s placeholders as PostgreSQL's own $1, $2, ... (and %% as %).

    Any other % (a named placeholder, a stray one) is refused, as psycopg refuses it.
    """
    numbers = itertools.count(1)

    def number(match: re.Match) -> str:
        if match.group(1) == "%":
            return "%"
        if match.group(1) == "s":
            return f"${next(numbers)}"
        raise ValueError(f"only %s placeholders (and %% for %) are allowed: {match.group(0)!r} in {sql!r}")

    return _PLACEHOLDER.sub(number, sql)


def _execute(connection, cursor, sql: str, params) -> None:
    """Run a statement written with %s placeholders on a cursor of `_cursor`."""
    cursor.execute(_numbered(sql) if connection.vendor == "postgresql" else sql, params)


def fetch_one(sql: str, params) -> tuple | None:
    connection = _connection()
    with _cursor(connection) as cursor:
        _execute(connection, cursor, sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params) -> list[tuple]:
    connection = _connection()
    with _cursor(connection) as cursor:
        _execute(connection, cursor, sql, params)
        return cursor.fetchall()


def execute(sql: str, params) -> int:
    """Run one statement; the number of rows it changed."""
    connection = _connection()
    with _cursor(connection) as cursor:
        _execute(connection, cursor, sql, params)
        return cursor.rowcount


def prep(model: type[Model], name: str, value):
    """A value for the column of field `name`, adapted as the ORM adapts it."""
    return model._meta.get_field(name).get_db_prep_save(value, _connection())


class DatabaseClockField(DateTimeField):
    """A time one process writes and another judges: insert() writes it on the database's clock.

    Set to any time, it means "now": on PostgreSQL the INSERTs written here
    store the server's clock_timestamp() in its place, so how far the
    writing host's clock is off does not matter to the process that compares
    it with the database's now. Empty stays empty. Elsewhere (SQLite: one
    process on one host) the value itself is stored, as the ORM's writes
    store it everywhere.
    """


def _placeholder(field, vendor: str) -> str:
    if vendor == "postgresql" and isinstance(field, DatabaseClockField):
        return "CASE WHEN %s::timestamptz IS NULL THEN NULL ELSE clock_timestamp() END"
    return "%s"


@functools.cache
def _insert_statement(model: type[Model], rows: int, vendor: str) -> tuple[str, tuple, object]:
    """(SQL, the fields it writes, the auto primary key it returns or None) of an INSERT of `rows` rows."""
    auto = model._meta.auto_field
    fields = tuple(field for field in model._meta.concrete_fields if field is not auto)
    row = "(" + ", ".join(_placeholder(field, vendor) for field in fields) + ")"
    sql = (
        f"INSERT INTO {table(model)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * rows)}"
    )
    if auto is not None:
        sql += f" RETURNING {quote(auto.column)}"
    return sql, fields, auto


def most_values(connection) -> int:
    """The most values one statement may bind: PostgreSQL's protocol counts them in 16 bits;
    SQLite's limit is 32,766 since 3.32 (Django's features keep the 999 of older builds)."""
    if connection.vendor == "sqlite":
        return 32766 if sqlite3.sqlite_version_info >= (3, 32) else 999
    return 65535


def insert(objs: list[Model]) -> None:
    """INSERT new instances of one model, as save()/bulk_create would: one statement, or one per
    most_values() worth of rows.

    Fills auto_now(_add) fields and, for a model with an auto primary key, each
    instance's pk (RETURNING). No signals are sent: the models written here
    have no receivers (tests/tasks_app/test_sql_writes.py keeps it so).
    """
    if not objs:
        return
    connection = _connection()
    rows = max(1, most_values(connection) // width(type(objs[0])))
    for start in range(0, len(objs), rows):
        chunk = objs[start : start + rows]
        sql, fields, auto = _insert_statement(type(chunk[0]), len(chunk), connection.vendor)
        with _cursor(connection) as cursor:
            _execute(connection, cursor, sql, _insert_values(connection, chunk, fields))
            pks = [pk for (pk,) in cursor.fetchall()] if auto is not None else None
        _stored(connection, chunk, auto, pks)


def _insert_values(connection, objs: list[Model], fields) -> list:
    """The values of an INSERT of objs, row after row, as save() adapts them (auto_now filled)."""
    return [field.get_db_prep_save(field.pre_save(obj, True), connection) for obj in objs for field in fields]


def _stored(connection, objs: list[Model], auto, pks: list | None) -> None:
    """Mark inserted instances as stored, with their new auto primary keys (in their order)."""
    if auto is not None:
        for obj, pk in zip(objs, pks, strict=True):
            setattr(obj, auto.attname, pk)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias


@functools.lru_cache(maxsize=256)
def _insert_all_statement(
    shape: tuple[tuple[type[Model], int], ...], updates: tuple[str, ...]
) -> tuple[str, list]:
    """PostgreSQL: one statement of several INSERTs, then UPDATEs (a WITH of them), and each INSERT's writes.

    It returns one row: an array of each INSERT's new primary keys (NULL for
    an INSERT of a model with no auto primary key), then the number of rows
    each UPDATE changed.
    """
    parts, returned, writes = [], [], []
    for n, (model, rows) in enumerate(shape):
        statement, fields, auto = _insert_statement(model, rows, "postgresql")
        parts.append(f"i{n} AS ({statement})")
        returned.append(f"(SELECT array_agg({quote(auto.column)}) FROM i{n})" if auto is not None else "NULL")
        writes.append((fields, auto))
    for n, statement in enumerate(updates):
        parts.append(f"u{n} AS ({statement} RETURNING 1)")
        returned.append(f"(SELECT count(*) FROM u{n})")
    return f"WITH {', '.join(parts)} SELECT {', '.join(returned)}", writes


def insert_all(groups: list[list[Model]], also: list[tuple[str, list]] = ()) -> list[int]:
    """insert() of each list, in one statement on PostgreSQL: a WITH of the INSERTs.

    For the rows one transaction writes together (a new task with its first
    message and log entry, a batch of a turn's events): a round trip and a
    statement instead of one per model. The rows of one list may not refer to
    those of another by an auto primary key (it is not known yet); a
    reference to a row inserted before, or to one named by its own key (a
    task's UUID), is fine. Each list's keys come back in its own order, as
    RETURNING gives a multi-row INSERT's (Django's bulk_create relies on the
    same). Elsewhere: one insert() per list, in the order given.

    `also`: UPDATE statements (SQL without RETURNING, and values) to run in
    the same statement, after the INSERTs elsewhere; returns the number of
    rows each changed. On PostgreSQL every part runs on one snapshot: an
    UPDATE must not touch a row another part writes, nor count on seeing the
    new rows.
    """
    groups = [objs for objs in groups if objs]
    connection = _connection()
    values = sum(len(objs) * width(type(objs[0])) for objs in groups) + sum(len(v) for _, v in also)
    if connection.vendor != "postgresql" or len(groups) + len(also) < 2 or values > most_values(connection):
        for objs in groups:
            insert(objs)
        return [execute(statement, params) for statement, params in also]
    sql, writes = _insert_all_statement(
        tuple((type(objs[0]), len(objs)) for objs in groups), tuple(statement for statement, _ in also)
    )
    params = [
        value
        for objs, (fields, _) in zip(groups, writes, strict=True)
        for value in _insert_values(connection, objs, fields)
    ]
    for _, values in also:
        params.extend(values)
    with _cursor(connection) as cursor:
        _execute(connection, cursor, sql, params)
        row = cursor.fetchone()
    for objs, (_, auto), pks in zip(groups, writes, row[: len(groups)], strict=True):
        _stored(connection, objs, auto, pks)
    return list(row[len(groups) :])


@functools.cache
def _update_statement(model: type[Model], names: tuple[str, ...]) -> tuple[str, list]:
    fields = [model._meta.get_field(name) for name in names]
    sql = (
        f"UPDATE {table(model)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)} "
        f"WHERE {quote(model._meta.pk.column)} = %s"
    )
    return sql, fields


def update_statement(obj: Model, names) -> tuple[str, list]:
    """update()'s statement and values (auto_now fields refreshed), for insert_all's `also`."""
    connection = _connection()
    model = type(obj)
    sql, fields = _update_statement(model, tuple(names))
    params = [field.get_db_prep_save(field.pre_save(obj, False), connection) for field in fields]
    params.append(model._meta.pk.get_db_prep_save(obj.pk, connection))
    return sql, params


def update(obj: Model, names) -> int:
    """UPDATE the named fields of a stored instance (auto_now fields refreshed), as save(update_fields)."""
    return execute(*update_statement(obj, names))
