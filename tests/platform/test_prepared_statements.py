"""On PostgreSQL the hot hand-written statements end up prepared on their connection.

Django turns psycopg's prepared statements off unless OPTIONS says otherwise;
without DB_PREPARE_THRESHOLD (settings.py) every run of them was parsed and
planned anew, about a third of PostgreSQL's CPU per blocking SendMessage
(bench/README.md).
"""

import pytest
from django.conf import settings
from django.db import connection

from agents.access import enabled_agent_sql, get_enabled_agent
from tests.postgres import numbered_placeholders


@pytest.mark.django_db
def test_a_hot_statement_is_prepared_after_the_threshold():
    if connection.vendor != "postgresql":
        pytest.skip("prepared statements are PostgreSQL's (the embedded default runs SQLite)")
    threshold = settings.DATABASES["default"]["OPTIONS"]["prepare_threshold"]
    assert threshold is not None
    for _ in range(threshold + 2):
        assert get_enabled_agent("no-such-tenant", "no-such-agent") is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        prepared = [row[0] for row in cursor.fetchall()]
    # The statement get_enabled_agent sends, as PostgreSQL shows it ($n for %s).
    select, joins, where = enabled_agent_sql()
    sent = numbered_placeholders(f"SELECT {select} {joins} WHERE {where}")
    assert sent in prepared, prepared
