"""validation.check_required_fields answers as the a2a-sdk's validate_proto_required_fields does.

It walks only what its cached shapes name, and hands any message missing a
REQUIRED field to the SDK's own check. So the property: whatever the message,
it raises exactly when the SDK's check raises, with the same error. Since a
refusal is the SDK's own, what can go wrong is a message let through that the
SDK refuses: the messages drawn here are often complete but for one REQUIRED
field, at any depth.
"""

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from google.api.field_behavior_pb2 import FieldBehavior, field_behavior
from google.protobuf.descriptor import FieldDescriptor
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tasks_app.protocol.validation import check_required_fields

# Every request the bindings parse, the two messages most nested in them, and the agent card
# (the one message whose map values hold REQUIRED fields: security_schemes).
CHECKED = sorted(
    [getattr(pb, name) for name in dir(pb) if name.endswith("Request")] + [pb.Task, pb.Message, pb.AgentCard],
    key=lambda cls: cls.DESCRIPTOR.name,
)

# Values a scalar field is given: its default (counts as missing when REQUIRED) or another.
SCALARS = {
    FieldDescriptor.TYPE_STRING: ["", "x"],
    FieldDescriptor.TYPE_BYTES: [b"", b"x"],
    FieldDescriptor.TYPE_BOOL: [False, True],
    FieldDescriptor.TYPE_ENUM: [0, 1],
    FieldDescriptor.TYPE_DOUBLE: [0.0, 1.5],
    FieldDescriptor.TYPE_FLOAT: [0.0, 1.5],
}

# The kinds of security scheme, each a message of the SecurityScheme oneof.
SCHEME_KINDS = [field.name for field in pb.SecurityScheme.DESCRIPTOR.fields if field.message_type is not None]


def _required(field: FieldDescriptor) -> bool:
    return FieldBehavior.REQUIRED in field.GetOptions().Extensions[field_behavior]


def _scalar(field: FieldDescriptor, complete: bool) -> st.SearchStrategy:
    values = SCALARS.get(field.type, [0, 1])
    return st.just(values[1]) if complete and _required(field) else st.sampled_from(values)


def _fill(draw, message, depth: int, complete: bool, spots: list) -> None:
    """Set a random choice of the message's fields, in place, and messages within it to `depth`.

    complete: every REQUIRED field is set, with a value that is not its default, at every level.
    `spots` gets each (message, REQUIRED field) set, for a test to clear one of them.
    """
    for field in message.DESCRIPTOR.fields:
        required = complete and _required(field)
        if not required and not draw(st.booleans()):
            continue
        value = getattr(message, field.name)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.full_name.startswith("google.protobuf.") or depth == 0:
                continue  # Struct, Timestamp and the like hold no REQUIRED field
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                for key in draw(st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True)):
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        _fill(draw, value[key], depth - 1, complete, spots)
                    else:
                        value[key] = draw(_scalar(value_field, complete))
            elif field.is_repeated:
                for _ in range(draw(st.integers(1 if required else 0, 2))):
                    _fill(draw, value.add(), depth - 1, complete, spots)
            else:
                value.SetInParent()
                _fill(draw, value, depth - 1, complete, spots)
        elif field.is_repeated:
            value.extend(draw(st.lists(_scalar(field, complete), min_size=1 if required else 0, max_size=2)))
        else:
            setattr(message, field.name, draw(_scalar(field, complete)))
        if _required(field):
            spots.append((message, field))


@st.composite
def _messages(draw):
    """A message of a CHECKED type: random, or with every REQUIRED field set and maybe one cleared again."""
    message = draw(st.sampled_from(CHECKED))()
    complete = draw(st.booleans())
    spots: list = []
    _fill(draw, message, 3, complete, spots)
    if complete and spots and draw(st.booleans()):
        holder, field = draw(st.sampled_from(spots))
        holder.ClearField(field.name)
    return message


@st.composite
def _cards_missing_a_field_in_a_security_scheme(draw):
    """A complete agent card, but for one REQUIRED field of a scheme in its security_schemes map."""
    card = pb.AgentCard()
    _fill(draw, card, 3, True, [])
    card.security_schemes.clear()
    scheme = getattr(card.security_schemes["scheme"], draw(st.sampled_from(SCHEME_KINDS)))
    scheme.SetInParent()
    inside: list = []
    _fill(draw, scheme, 0, True, inside)  # its own fields only: no oneof within can move them away
    assume(inside)
    holder, field = draw(st.sampled_from(inside))
    holder.ClearField(field.name)
    return card


def _outcome(check, message):
    try:
        check(message)
    except InvalidParamsError as error:
        return error.message, error.data
    return None


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages())
def test_raises_exactly_when_the_sdks_check_does(message):
    assert _outcome(check_required_fields, message) == _outcome(validate_proto_required_fields, message)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_cards_missing_a_field_in_a_security_scheme())
def test_a_field_missing_inside_a_map_value_is_found(card):
    assert _outcome(check_required_fields, card) is not None
    assert _outcome(check_required_fields, card) == _outcome(validate_proto_required_fields, card)


def _complete_send() -> pb.SendMessageRequest:
    return pb.SendMessageRequest(
        message=pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text="hi")]),
        configuration=pb.SendMessageConfiguration(
            task_push_notification_config=pb.TaskPushNotificationConfig(url="http://127.0.0.1:9/hook")
        ),
    )


def test_a_complete_request_passes():
    assert validate_proto_required_fields(_complete_send()) is None
    assert check_required_fields(_complete_send()) is None


@pytest.mark.parametrize(
    ("clear", "error"),
    [
        ("message_id", "Field is required."),
        ("role", "Field is required."),
        ("parts", "Field must contain at least one element."),
    ],
)
def test_a_missing_field_of_the_message_is_the_sdks_own_error(clear, error):
    request = _complete_send()
    request.message.ClearField(clear)
    with pytest.raises(InvalidParamsError) as raised:
        check_required_fields(request)
    assert raised.value.data == {"errors": [{"field": f"message.{clear}", "message": error}]}


def test_a_push_config_without_its_url_is_refused():
    request = _complete_send()
    request.configuration.task_push_notification_config.ClearField("url")
    with pytest.raises(InvalidParamsError) as raised:
        check_required_fields(request)
    assert raised.value.data == {
        "errors": [
            {"field": "configuration.task_push_notification_config.url", "message": "Field is required."}
        ]
    }


def _complete_task() -> pb.Task:
    return pb.Task(
        id="t-1",
        status=pb.TaskStatus(state=pb.TASK_STATE_COMPLETED),
        history=[pb.Message(message_id="m-1", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])],
        artifacts=[pb.Artifact(artifact_id="a-1", parts=[pb.Part(text="x")])],
    )


@pytest.mark.parametrize(
    ("where", "clear"), [("history", "parts"), ("artifacts", "artifact_id"), ("artifacts", "parts")]
)
def test_a_field_missing_in_a_tasks_history_or_artifacts_is_refused(where, clear):
    check_required_fields(_complete_task())
    task = _complete_task()
    getattr(task, where)[0].ClearField(clear)
    with pytest.raises(InvalidParamsError) as raised:
        check_required_fields(task)
    assert [error["field"] for error in raised.value.data["errors"]] == [f"{where}[0].{clear}"]
