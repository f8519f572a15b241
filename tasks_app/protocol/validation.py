"""Input checks that every binding runs before an operation sees a request.

Bad input gets a clear error (-32700 / -32602, HTTP 400) here, so that nothing
further down fails on it with an internal error or stores something broken:

- load_json: JSON too deeply nested for the parser is a parse error, like any other.
  An integer too large for a double reads as infinite, as 1e400 does.
- parse_dict: ProtoJSON into a proto, refusing what ParseDict would silently
  change (unknown enum names, which ignore_unknown_fields turns into the
  default, and malformed base64, which it decodes leniently), and numbers JSON
  cannot carry: NaN, Infinity and -Infinity (json's bare tokens) and the
  infinities of numbers beyond a double's range. Protobuf takes them into a
  Struct but refuses to print them, so a stored one would break every read.
- check_request: every parsed request proto, whatever the binding or dialect
  (the 1.0 bindings parse through parse_request, the 0.3 and draft dialects run
  their 1.0 requests through legacy.common.run, which calls it): no NUL
  character or unpaired surrogate anywhere (PostgreSQL stores none in text or jsonb), no nesting
  deeper than protobuf itself copes with, ids no longer than their columns,
  parts with content, and no NaN or infinity in a request the 0.3 dialect built
  with the SDK's conversions rather than parse_dict.
"""

import base64
import binascii
import functools
import json
import math
import re
from collections import deque
from typing import NamedTuple

from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from a2a.utils.proto_utils import validate_proto_required_fields
from google.api.field_behavior_pb2 import FieldBehavior, field_behavior
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.json_format import MessageToDict, ParseDict

from tasks_app.models import Context, Message

# Containers (objects and arrays) inside one request, counted from its params.
# protobuf's upb runtime refuses messages nested deeper than 100 levels, and
# every JSON level of a data part or metadata costs it three (Value, Struct and
# the map entry), plus the levels a stored message is wrapped in (StreamResponse,
# Task, status). A request within this limit can be stored, streamed and copied.
MAX_NESTING = 32

# The columns client-chosen ids are stored in.
MESSAGE_ID_MAX = Message._meta.get_field("message_id").max_length
CONTEXT_ID_MAX = Context._meta.get_field("context_id").max_length

INT32_LIMIT = 2**31
PART_CONTENT = "text, raw, url or data"
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}|[A-Za-z0-9_-]*={0,2}")


def load_json(raw: bytes | str):
    """json.loads, where nesting too deep for the parser is a ValueError like other bad JSON.

    NaN, Infinity and -Infinity come back as floats, as json reads them, and so do
    numbers beyond a double's range (infinite): parse_dict refuses them all.
    """
    try:
        return json.loads(raw, parse_int=_parse_int)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


def _parse_int(text: str) -> int | float:
    # Protobuf turns a Struct number into a double and overflows on more; an int
    # that large reads as the infinity 1e400 reads as, refused with it.
    if len(text) > 300 and math.isinf(as_float := float(text)):
        return as_float
    return int(text)


def is_base64(value: str) -> bool:
    """Whether a ProtoJSON bytes value is base64: standard or URL-safe alphabet, padding optional."""
    return standard_base64(value) is not None


def standard_base64(value: str) -> str | None:
    """A base64 value (either alphabet, padding optional) in the standard one, padded; None if not base64."""
    if not _BASE64.fullmatch(value):
        return None
    unpadded = value.rstrip("=")
    if len(unpadded) % 4 == 1 or (len(value) != len(unpadded) and len(value) % 4):
        return None
    standard = unpadded.replace("-", "+").replace("_", "/")
    standard += "=" * (-len(standard) % 4)
    try:
        base64.b64decode(standard, validate=True)
    except binascii.Error:
        return None
    return standard


def check_int32(value: int | None, where: str) -> None:
    """A client number bound for an int32 proto field, which raises ValueError past its range."""
    if value is not None and not -INT32_LIMIT <= value < INT32_LIMIT:
        raise InvalidParamsError(message=f"Invalid params: {where} is out of range ({value})")


def check_text(value: str, where: str) -> None:
    """A client string used in a lookup or stored as is: no NUL character, no unpaired surrogate.

    JSON can escape half a surrogate pair ("\\ud800"), which no UTF-8 text holds:
    the database driver and protobuf raise on it.
    """
    if "\x00" in value:
        raise InvalidParamsError(message=f"Invalid params: {where} contains a NUL character (\\u0000)")
    _check_utf8(value, where)


def _check_utf8(value: str, where: str) -> None:
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:
            raise InvalidParamsError(
                message=f"Invalid params: {where} contains an unpaired surrogate"
            ) from None


def parse_dict(data: dict, message):
    """ProtoJSON into `message`; unknown fields are ignored, wrong values are -32602."""
    _check_finite(data)
    _check_json(data, message.DESCRIPTOR, "")  # first: its messages name the field
    try:
        ParseDict(data, message, ignore_unknown_fields=True)
    except Exception as exc:  # protobuf raises ParseError, TypeError, DecodeError and others
        raise InvalidParamsError(message=f"Invalid params: {exc}") from None
    return message


def parse_request(data: dict, request_type):
    """A 1.0 request proto from ProtoJSON params, checked (see the module docstring)."""
    parsed = parse_dict(data, request_type())
    check_required_fields(parsed)
    check_request(parsed)
    return parsed


# How a message field holds its messages (_Shape.nested).
_SINGLE, _REPEATED, _MAP = "single", "repeated", "map"


class _Shape(NamedTuple):
    """What checking a message type's REQUIRED fields looks at: those fields, and where they may nest."""

    required: tuple[FieldDescriptor, ...]
    # (field name, _SINGLE / _REPEATED / _MAP) of each message field whose type may hold a REQUIRED field.
    nested: tuple[tuple[str, str], ...]


def check_required_fields(message) -> None:
    """The a2a-sdk's validate_proto_required_fields, with its per-field lookups made once per type.

    The SDK reads every field's options on every call, of every nested
    message: about 3% of the web process's CPU per SendMessage (py-spy,
    bench/README.md). Here a message type's REQUIRED fields, and the fields
    through which one may be reached, are found once; a request that has them
    all costs a walk of those alone. One that misses any goes to the SDK's own
    check, which raises its error (InvalidParamsError with each field's path).
    """
    if not _has_required(message):
        validate_proto_required_fields(message)


def _has_required(message) -> bool:
    shape = _shape(message.DESCRIPTOR)
    for field in shape.required:
        value = getattr(message, field.name)
        if field.is_repeated:
            if not value:
                return False
        elif field.has_presence:
            if not message.HasField(field.name):
                return False
        elif value == field.default_value:
            return False
    for name, kind in shape.nested:
        value = getattr(message, name)
        if kind == _SINGLE:
            if message.HasField(name) and not _has_required(value):
                return False
        elif kind == _REPEATED:
            if not all(_has_required(item) for item in value):
                return False
        elif not all(_has_required(item) for item in value.values()):
            return False
    return True


def _is_required(field: FieldDescriptor) -> bool:
    return FieldBehavior.REQUIRED in field.GetOptions().Extensions[field_behavior]


@functools.cache
def _shape(descriptor: Descriptor) -> _Shape:
    required = tuple(field for field in descriptor.fields if _is_required(field))
    nested = []
    for field in descriptor.fields:
        if field.type != FieldDescriptor.TYPE_MESSAGE:
            continue
        if field.message_type.GetOptions().map_entry:
            value_type = field.message_type.fields_by_name["value"].message_type
            if value_type is not None and _may_require(value_type):
                nested.append((field.name, _MAP))
        elif _may_require(field.message_type):
            nested.append((field.name, _REPEATED if field.is_repeated else _SINGLE))
    return _Shape(required, tuple(nested))


@functools.cache
def _may_require(descriptor: Descriptor) -> bool:
    """Whether a message of this type can hold a REQUIRED field, in itself or in any message within it."""
    seen, stack = set(), [descriptor]
    while stack:
        current = stack.pop()
        if current.full_name in seen:
            continue
        seen.add(current.full_name)
        for field in current.fields:
            if _is_required(field):
                return True
            if field.type == FieldDescriptor.TYPE_MESSAGE:
                stack.append(field.message_type)
    return False


def _check_finite(data) -> None:
    """No NaN or infinite number anywhere in the params (breadth first, no recursion)."""
    queue = deque([("", data)])
    while queue:
        path, value = queue.popleft()
        if isinstance(value, float) and not math.isfinite(value):
            shown = path if len(path) <= 80 else path[:80] + "..."
            number = "NaN" if math.isnan(value) else ("-Infinity" if value < 0 else "Infinity")
            raise InvalidParamsError(
                message=f"Invalid params: {shown or 'params'} is {number}; JSON numbers must be finite"
                " and fit in a double"
            )
        if isinstance(value, dict):
            queue.extend((f"{path}.{key}" if path else key, item) for key, item in value.items())
        elif isinstance(value, list):
            queue.extend((f"{path}[{index}]", item) for index, item in enumerate(value))


def _check_json(data, descriptor, path: str) -> None:
    """What ParseDict let through but changed: unknown enum names and malformed base64."""
    if not isinstance(data, dict):
        return
    for key, value in data.items():
        # Even an unknown field's name: protobuf's lookup of one it cannot encode raises SystemError.
        _check_utf8(key, f"a key in {path or 'params'}")
        field = descriptor.fields_by_camelcase_name.get(key) or descriptor.fields_by_name.get(key)
        if field is None or value is None:
            continue
        where = f"{path}.{key}" if path else key
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            value_field = field.message_type.fields_by_name["value"]
            for map_key, item in value.items() if isinstance(value, dict) else ():
                _check_json_value(value_field, item, f"{where}.{map_key}")
        elif field.is_repeated:
            for index, item in enumerate(value) if isinstance(value, list) else ():
                _check_json_value(field, item, f"{where}[{index}]")
        else:
            _check_json_value(field, value, where)


def _check_json_value(field, value, where: str) -> None:
    if field.type == FieldDescriptor.TYPE_BYTES and isinstance(value, str):
        if not is_base64(value):
            raise InvalidParamsError(message=f"Invalid params: {where} is not valid base64")
    elif field.type == FieldDescriptor.TYPE_ENUM and isinstance(value, str):
        enum = field.enum_type
        _check_utf8(value, where)  # protobuf's lookup of a name it cannot encode raises
        if enum.full_name != "google.protobuf.NullValue" and value not in enum.values_by_name:
            names = ", ".join(v.name for v in enum.values if v.number != 0)
            raise InvalidParamsError(
                message=f"Invalid params: {where} '{value}' is not a {enum.name}; use one of {names}"
            )
    elif field.type == FieldDescriptor.TYPE_MESSAGE and not field.message_type.full_name.startswith(
        "google.protobuf."
    ):
        _check_json(value, field.message_type, where)


def check_request(request) -> None:
    """The checks every request proto passes before an operation runs it."""
    try:
        data = MessageToDict(request)  # the camelCase names clients send, for the messages
    except (json_format.Error, ValueError) as exc:
        # A proto that did not come through parse_dict (the 0.3 dialect's SDK conversions)
        # with a value protobuf will not print, such as NaN or an infinity in a Struct.
        raise InvalidParamsError(message=f"Invalid params: {exc}") from None
    check_values(data)
    if isinstance(request, pb.SendMessageRequest):
        _check_message(request.message, data.get("message", {}))


def check_values(data: dict) -> None:
    """No NUL or unpaired surrogate in any string or key, no nesting beyond MAX_NESTING (breadth first)."""
    queue = deque([("", data, 1)])
    while queue:
        path, value, depth = queue.popleft()
        if isinstance(value, str):
            check_text(value, path or "params")
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > MAX_NESTING:
            shown = path if len(path) <= 80 else path[:80] + "..."
            raise InvalidParamsError(
                message=f"Invalid params: {shown} is nested more than {MAX_NESTING} levels deep"
            )
        if isinstance(value, dict):
            for key, item in value.items():
                check_text(key, f"a key in {path or 'params'}")
                queue.append((f"{path}.{key}" if path else key, item, depth + 1))
        else:
            queue.extend((f"{path}[{index}]", item, depth + 1) for index, item in enumerate(value))


def _check_message(message: pb.Message, data: dict) -> None:
    for name, limit in (("messageId", MESSAGE_ID_MAX), ("contextId", CONTEXT_ID_MAX)):
        if len(data.get(name, "")) > limit:
            raise InvalidParamsError(
                message=f"Invalid params: message.{name} is longer than {limit} characters"
            )
    for index, part in enumerate(message.parts):
        if part.WhichOneof("content") is None:
            raise InvalidParamsError(
                message=f"Invalid params: message.parts[{index}] has no content; a part needs {PART_CONTENT}"
            )
