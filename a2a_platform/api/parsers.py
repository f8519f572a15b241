"""The management API's JSON parser: DRF's, with a bound on how deeply a body may nest.

DRF's parser answers bad JSON with a 400 but lets RecursionError through, a
500, for a body nested deeper than the json module reads; and a body it reads
can still be too deep for what comes after it (the serializers' checks walk
config and skills recursively, and so do the JSON encoders that store and
answer them). Nothing the API takes needs more than a few levels.
"""

from collections import deque

from rest_framework import parsers
from rest_framework.exceptions import ParseError

MAX_NESTING = 64


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        too_deep = ParseError(f"JSON parse error - the body is nested more than {MAX_NESTING} levels deep")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise too_deep from None
        if _nesting_exceeds(data, MAX_NESTING):
            raise too_deep
        return data


def _nesting_exceeds(data, limit: int) -> bool:
    """Whether objects and arrays nest more than `limit` levels anywhere in `data` (no recursion)."""
    queue = deque([(data, 1)])
    while queue:
        value, depth = queue.popleft()
        if isinstance(value, dict | list):
            if depth > limit:
                return True
            items = value.values() if isinstance(value, dict) else value
            queue.extend((item, depth + 1) for item in items)
    return False
