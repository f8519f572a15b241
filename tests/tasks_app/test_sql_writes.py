"""The engine's hot writes (tenants/sql.py) send no model signals: keep their models without receivers.

`sql.insert` and `sql.update` write Context, Task, Message, Artifact and
TaskEvent rows without save(), so a pre_save or post_save receiver on one of
them would silently miss those writes. Whoever adds one must first move the
writes back to the ORM, or send the signal there.
"""

import pytest
from django.db.models.signals import post_save, pre_save

from tasks_app.models import Artifact, Context, Message, Task, TaskEvent


@pytest.mark.parametrize(
    "model", [Context, Task, Message, Artifact, TaskEvent], ids=lambda model: model.__name__
)
def test_models_written_without_save_have_no_save_receivers(model):
    assert not pre_save.has_listeners(model)
    assert not post_save.has_listeners(model)
