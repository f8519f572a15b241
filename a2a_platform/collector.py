"""The garbage collector in the long-running processes: what they load at start-up is left out of it.

Python's cyclic collector walks every tracked object of the generation it
collects, and the oldest generation holds all that start-up loaded: Django,
Celery, the a2a-sdk and protobuf's modules, the URL and model registries, a few
hundred thousand objects that live as long as the process. Each full
collection walked them all again. Under load a worker spent about a tenth of
its CPU in the collector (py-spy --native at c=32, bench/README.md), more the
more requests were in flight.

`freeze_startup_objects()` runs once a process is ready to serve: it collects
what start-up left behind, then freezes the rest (gc.freeze) so that later
collections walk only objects made since. The collector still runs; nothing
it could free is kept from it, except start-up's own objects, which live on
anyway. Where it runs:

- a web process: when `a2a_platform.asgi` is imported, which is what Daphne
  serves (`webserve`'s processes, and `serve`'s one process with its worker
  threads); a test that imports it in process freezes the test's process too;
- a worker: once Celery's worker is ready (the threads pool, as `workserve`
  runs it), and in each child a prefork pool would start;
- `grpcserve`, before it serves.
"""

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_objects() -> None:
    """Collect, then freeze what is left out of later collections."""
    gc.collect()
    gc.freeze()
    logger.debug("%d objects of start-up frozen out of the collector", gc.get_freeze_count())
