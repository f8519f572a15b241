"""Django's CommonMiddleware, with its slash redirect kept to requests that have no body."""

from django.middleware import common


class CommonMiddleware(common.CommonMiddleware):
    """A POST (or any request but GET and HEAD) to a URL without its trailing slash is a 404.

    Django redirects it to the URL with the slash, where clients resend it as
    a GET without its body; with DEBUG on it raises instead, a 500. A JSON-RPC
    or API call to `/a2a/<tenant>/<agent>` learns at once that the URL is wrong.
    """

    def should_redirect_with_slash(self, request):
        return request.method in ("GET", "HEAD") and super().should_redirect_with_slash(request)
