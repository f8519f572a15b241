"""Swagger UI and Redoc assets from drf-spectacular-sidecar, so the docs page needs no CDN.

Served by Django itself: the platform's ASGI server does not serve static
files, and these few files are small and cacheable.
"""

from pathlib import Path

import drf_spectacular_sidecar
from django.views.decorators.http import require_GET
from django.views.static import serve

ASSETS = Path(drf_spectacular_sidecar.__file__).parent / "static" / "drf_spectacular_sidecar"


@require_GET
def docs_asset(request, path: str):
    response = serve(request, path, document_root=ASSETS)
    response["Cache-Control"] = "public, max-age=86400"
    return response
