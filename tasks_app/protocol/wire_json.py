"""The bindings' answers as JSON text, written by orjson.

Django's JsonResponse writes with the standard library's encoder. For a
GetTask whose page holds a hundred messages that was the largest single cost
in the web process under load: 14% of its samples (py-spy, bench/README.md).
orjson writes the same values several times faster.

The text is compact, and characters past ASCII are written as UTF-8, not as
\\u escapes: the same JSON to any parser. What orjson refuses is written as
before by the standard library (DjangoJSONEncoder), so nothing that used to
be answered is now an error: an integer past 64 bits, a lone surrogate, a
key that is not a string, or a type only Django's encoder knows (Decimal, a
lazy translation). Dates and times go that way too, so they keep Django's
spelling (milliseconds, "Z" for UTC). One difference: a NaN or infinite
number would be written as null, valid JSON, where the standard library wrote
NaN, which clients refuse; none reaches an answer, as the bindings refuse a
request that carries one (protocol/validation.py).
"""

import json

import orjson
from django.core.serializers.json import DjangoJSONEncoder
from django.http import HttpResponse

_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME


def json_bytes(value) -> bytes:
    """`value` as UTF-8 JSON text."""
    try:
        return orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return json.dumps(value, cls=DjangoJSONEncoder, separators=(",", ":")).encode()


class JsonAnswer(HttpResponse):
    """An HttpResponse of `data` (a dict) as JSON: JsonResponse's replacement on the A2A bindings."""

    def __init__(self, data: dict, **kwargs):
        kwargs.setdefault("content_type", "application/json")
        super().__init__(content=json_bytes(data), **kwargs)
