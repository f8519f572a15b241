"""Django's CommonMiddleware without a POST's slash redirect, and a query Django will not read."""

from django.core.exceptions import TooManyFieldsSent
from django.http import JsonResponse
from django.middleware import common
from django.utils.deprecation import MiddlewareMixin


class CommonMiddleware(common.CommonMiddleware):
    """A POST (or any request but GET and HEAD) to a URL without its trailing slash is a 404.

    Django redirects it to the URL with the slash, where clients resend it as
    a GET without its body; with DEBUG on it raises instead, a 500. A JSON-RPC
    or API call to `/a2a/<tenant>/<agent>` learns at once that the URL is wrong.
    """

    def should_redirect_with_slash(self, request):
        return request.method in ("GET", "HEAD") and super().should_redirect_with_slash(request)


class QueryFieldsMiddleware(MiddlewareMixin):
    """A query string with more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS is a 400, before any view.

    Django raises TooManyFieldsSent where request.GET is first read. Its handler
    answers 400, but with DEBUG on its error page reads request.GET again and
    fails: a 500 (the agent cards, the catalog, the management API). The A2A
    bindings read the query in their views and answer it in their own wire
    formats, so this does not run on their routes (a2a_asgi.NOT_ON_BINDING_ROUTES).
    """

    def process_request(self, request):
        try:
            request.GET  # noqa: B018 (parsed here, where a refusal is an answer)
        except TooManyFieldsSent as exc:
            return JsonResponse({"detail": f"Bad request: {exc}"}, status=400)
        return None
