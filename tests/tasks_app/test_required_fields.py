"""validation.check_required_fields answers as the a2a-sdk's validate_proto_required_fields does.

It walks only what its cached shapes name, and hands any message missing a
REQUIRED field to the SDK's own check. So the property: whatever the message,
it raises exactly when the SDK's check raises, with the same error.
"""

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message_factory import GetMessageClass
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tasks_app.protocol.validation import check_required_fields

# Every request the bindings parse, and the two messages most nested in them.
CHECKED = sorted(
    [getattr(pb, name) for name in dir(pb) if name.endswith("Request")] + [pb.Task, pb.Message],
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


def _scalar(field: FieldDescriptor) -> st.SearchStrategy:
    return st.sampled_from(SCALARS.get(field.type, [0, 1]))


@st.composite
def _filled(draw, descriptor, depth: int):
    """A message of this type with a random choice of its fields set, messages within to `depth`."""
    message = GetMessageClass(descriptor)()
    for field in descriptor.fields:
        if not draw(st.booleans()):
            continue
        value = getattr(message, field.name)
        if field.type == FieldDescriptor.TYPE_MESSAGE:
            if field.message_type.full_name.startswith("google.protobuf.") or depth == 0:
                continue  # Struct, Timestamp and the like hold no REQUIRED field
            if field.message_type.GetOptions().map_entry:
                value_field = field.message_type.fields_by_name["value"]
                for key in draw(st.lists(st.sampled_from(["a", "b"]), max_size=2, unique=True)):
                    if value_field.type == FieldDescriptor.TYPE_MESSAGE:
                        value[key].CopyFrom(draw(_filled(value_field.message_type, depth - 1)))
                    else:
                        value[key] = draw(_scalar(value_field))
            elif field.is_repeated:
                for _ in range(draw(st.integers(0, 2))):
                    value.add().CopyFrom(draw(_filled(field.message_type, depth - 1)))
            else:
                value.CopyFrom(draw(_filled(field.message_type, depth - 1)))
        elif field.is_repeated:
            value.extend(draw(st.lists(_scalar(field), max_size=2)))
        else:
            setattr(message, field.name, draw(_scalar(field)))
    return message


def _outcome(check, message):
    try:
        check(message)
    except InvalidParamsError as error:
        return error.message, error.data
    return None


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CHECKED).flatmap(lambda cls: _filled(cls.DESCRIPTOR, 3)))
def test_raises_exactly_when_the_sdks_check_does(message):
    assert _outcome(check_required_fields, message) == _outcome(validate_proto_required_fields, message)


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


@pytest.mark.parametrize("clear", ["message_id", "role", "parts"])
def test_a_missing_field_deep_in_the_request_is_the_sdks_own_error(clear):
    request = _complete_send()
    request.message.ClearField(clear)
    with pytest.raises(InvalidParamsError) as raised:
        check_required_fields(request)
    assert raised.value.data == {
        "errors": [{"field": f"message.{clear}", "message": raised.value.data["errors"][0]["message"]}]
    }
    assert _outcome(check_required_fields, request) == _outcome(validate_proto_required_fields, request)
