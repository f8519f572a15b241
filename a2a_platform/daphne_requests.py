"""Daphne's requests without Twisted's parse of form bodies.

Twisted's http.Request parses every POST body whose Content-Type it can read
into `request.args`, looking the type up through the email package, before
Daphne ever sees the request. Daphne never reads `args`: it hands the raw body
to the ASGI application, and Django parses forms itself. Every A2A call is a
POST with a Content-Type, and that unused parse was about 4% of the web
process's CPU per GetTask (py-spy, bench/README.md).

Twisted's own switch for it (`parsePOSTFormSubmission`) is an argument of the
request's constructor, which Daphne does not expose; `disable_form_parsing()`
passes it. It changes nothing if the Twisted in use has no such argument.
"""

import functools
import inspect


def disable_form_parsing() -> bool:
    """Make Daphne's requests skip Twisted's form parsing. True if it took effect."""
    from daphne.http_protocol import WebRequest
    from twisted.web import http

    if getattr(WebRequest, "_a2a_no_form_parsing", False):
        return True
    if "parsePOSTFormSubmission" not in inspect.signature(http.Request.__init__).parameters:
        return False
    original = WebRequest.__init__

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        kwargs.setdefault("parsePOSTFormSubmission", False)
        original(self, *args, **kwargs)

    WebRequest.__init__ = __init__
    WebRequest._a2a_no_form_parsing = True
    return True
