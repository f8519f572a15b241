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
RETURNING) run; `%s` is the placeholder on both.
"""

import functools

from django.db import connection
from django.db.models import Model


def quote(name: str) -> str:
    return connection.ops.quote_name(name)


def table(model: type[Model]) -> str:
    return quote(model._meta.db_table)


@functools.cache
def columns(model: type[Model], alias: str) -> str:
    """Every column of the model, in its field order, for a SELECT list (`alias`."col", ...)."""
    return ", ".join(f"{alias}.{quote(field.column)}" for field in model._meta.concrete_fields)


@functools.cache
def _converters(model: type[Model], vendor: str) -> list[tuple[int, object, list]]:
    """(index, column expression, converters) of each field whose raw value needs converting."""
    found = []
    for index, field in enumerate(model._meta.concrete_fields):
        col = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(col) + field.get_db_converters(connection)
        if converters:
            found.append((index, col, converters))
    return found


def hydrate(model: type[Model], row, start: int = 0) -> Model:
    """The model instance whose columns (as `columns()` lists them) begin at row[start]."""
    width = len(model._meta.concrete_fields)
    values = list(row[start : start + width])
    for index, col, converters in _converters(model, connection.vendor):
        value = values[index]
        for converter in converters:
            value = converter(value, col, connection)
        values[index] = value
    return model.from_db(connection.alias, None, values)


def width(model: type[Model]) -> int:
    return len(model._meta.concrete_fields)


def hydrate_all(row, *models: type[Model]) -> list[Model]:
    """One instance of each model, from a row that selected their `columns()` one after the other."""
    found, start = [], 0
    for model in models:
        found.append(hydrate(model, row, start))
        start += width(model)
    return found


def fetch_one(sql: str, params) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetch_all(sql: str, params) -> list[tuple]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def execute(sql: str, params) -> int:
    """Run one statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def prep(model: type[Model], name: str, value):
    """A value for the column of field `name`, adapted as the ORM adapts it."""
    return model._meta.get_field(name).get_db_prep_save(value, connection)


@functools.cache
def _insert_fields(model: type[Model]) -> tuple:
    auto = model._meta.auto_field
    return tuple(field for field in model._meta.concrete_fields if field is not auto)


def insert(objs: list[Model]) -> None:
    """INSERT new instances of one model in one statement, as save()/bulk_create would.

    Fills auto_now(_add) fields and, for a model with an auto primary key, each
    instance's pk (RETURNING). No signals are sent: the models written here
    have no receivers.
    """
    if not objs:
        return
    model = type(objs[0])
    fields = _insert_fields(model)
    auto = model._meta.auto_field
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (
        f"INSERT INTO {table(model)} ({', '.join(quote(f.column) for f in fields)}) "
        f"VALUES {', '.join([row] * len(objs))}"
    )
    if auto is not None:
        sql += f" RETURNING {quote(auto.column)}"
    params = [
        field.get_db_prep_save(field.pre_save(obj, True), connection) for obj in objs for field in fields
    ]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        if auto is not None:
            for obj, (pk,) in zip(objs, cursor.fetchall(), strict=True):
                setattr(obj, auto.attname, pk)
    for obj in objs:
        obj._state.adding = False
        obj._state.db = connection.alias


def update(obj: Model, names) -> int:
    """UPDATE the named fields of a stored instance (auto_now fields refreshed), as save(update_fields)."""
    model = type(obj)
    fields = [model._meta.get_field(name) for name in names]
    sql = (
        f"UPDATE {table(model)} SET {', '.join(f'{quote(f.column)} = %s' for f in fields)} "
        f"WHERE {quote(model._meta.pk.column)} = %s"
    )
    params = [field.get_db_prep_save(field.pre_save(obj, False), connection) for field in fields]
    params.append(model._meta.pk.get_db_prep_save(obj.pk, connection))
    return execute(sql, params)
