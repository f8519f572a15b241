"""The garbage collector in the long-running processes: what they load at start-up is left out of it.

Python's cyclic collector walks every tracked object of the generation it
collects, and the oldest generation holds all that start-up loaded: Django,
Celery, the a2a-sdk and protobuf's modules, the URL and model registries, a few
hundred thousand objects that live as long as the process. Each full
collection walked them all again. Under load a worker spent about a tenth of
its CPU in the collector (py-spy --native at c=32, bench/README.md), more the
more requests were in flight.

`leave_startup_objects()` runs once a process is ready to serve: it collects
what start-up left behind, then freezes the rest (gc.freeze) so that later
collections walk only objects made since. The collector still runs; nothing
it could free is kept from it, except start-up's own objects, which live on
anyway.
"""

import gc
import logging

logger = logging.getLogger(__name__)


def leave_startup_objects() -> int:
    """Collect, then freeze what is left; the number of objects frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.debug("%d objects of start-up frozen out of the collector", frozen)
    return frozen
