"""Tell open console feeds when someone loses a tenant.

The console's live feed (a2a_platform/console/consumers.py) checks access when
its socket opens. When a membership goes away, moves to another user or
tenant, or its user is deactivated, deleted or stops being a superuser, a
`member.revoked` note goes to the tenant's group after commit; the user's
sockets there check their access again and close when it is gone.

Signals, not the services: a member also leaves through the Django admin, the
admin's user pages and cascades (a queryset .delete() sends them too). A
queryset .update() or raw SQL sends none; the feed's periodic re-check covers
those.

Signing out (the console's or the admin's) sends a `session.ended` note to
that sign-in's group: its sockets, in every tab, close.
"""

import logging

from django.contrib.auth import get_user_model
from django.contrib.auth.signals import user_logged_out
from django.db import transaction
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver

from a2a_platform.console.consumers import session_group_name
from tasks_app.events import publish_soon, publish_tenant
from tenants.models import Membership, Tenant

log = logging.getLogger(__name__)
User = get_user_model()
# The User fields whose change can take a tenant away from someone.
ACCESS_FIELDS = ("is_active", "is_superuser")


def feed_revoke(*, user_pk, tenant_pks) -> None:
    """After commit, tell the feeds of these tenants that `user_pk` may have lost them.

    Call inside the change's transaction. A channel layer that is down loses
    the note, never the change; the feeds re-check on their own in a while.
    """
    note = {"type": "member.revoked", "user": user_pk}
    tenant_pks = list(dict.fromkeys(tenant_pks))

    def publish() -> None:
        for tenant_pk in tenant_pks:
            try:
                publish_tenant(tenant_pk, note)
            except Exception:
                log.exception("Could not tell tenant %s's feeds that user %s left", tenant_pk, user_pk)

    if tenant_pks:
        transaction.on_commit(publish)


@receiver(post_delete, sender=Membership, dispatch_uid="tenants.feed.membership_delete")
def membership_deleted(sender, instance, **kwargs):
    feed_revoke(user_pk=instance.user_id, tenant_pks=[instance.tenant_id])


@receiver(pre_save, sender=Membership, dispatch_uid="tenants.feed.membership_before")
def membership_before_save(sender, instance, raw=False, **kwargs):
    # The admin's inline lets a row change its user (or tenant): the old pair loses access.
    instance._feed_previous = None
    if raw or instance.pk is None:
        return
    instance._feed_previous = (
        Membership.objects.filter(pk=instance.pk).values_list("user_id", "tenant_id").first()
    )


@receiver(post_save, sender=Membership, dispatch_uid="tenants.feed.membership_save")
def membership_saved(sender, instance, created, **kwargs):
    previous = getattr(instance, "_feed_previous", None)
    if previous and previous != (instance.user_id, instance.tenant_id):
        feed_revoke(user_pk=previous[0], tenant_pks=[previous[1]])


@receiver(pre_save, sender=User, dispatch_uid="tenants.feed.user_before")
def user_before_save(sender, instance, raw=False, update_fields=None, **kwargs):
    instance._feed_previous = None
    if raw or instance.pk is None:
        return
    # A sign-in saves last_login only: no query for that.
    if update_fields is not None and not set(update_fields) & set(ACCESS_FIELDS):
        return
    instance._feed_previous = User.objects.filter(pk=instance.pk).values(*ACCESS_FIELDS).first()


@receiver(post_save, sender=User, dispatch_uid="tenants.feed.user_save")
def user_saved(sender, instance, created, **kwargs):
    previous = getattr(instance, "_feed_previous", None)
    if not previous:
        return
    was_superuser = previous["is_superuser"]
    deactivated = previous["is_active"] and not instance.is_active
    demoted = was_superuser and not instance.is_superuser
    if not (deactivated or demoted):
        return
    if was_superuser:
        # A superuser may have any tenant open.
        tenant_pks = Tenant.objects.values_list("pk", flat=True)
    else:
        tenant_pks = Membership.objects.filter(user_id=instance.pk).values_list("tenant_id", flat=True)
    feed_revoke(user_pk=instance.pk, tenant_pks=list(tenant_pks))


@receiver(post_delete, sender=User, dispatch_uid="tenants.feed.user_delete")
def user_deleted(sender, instance, **kwargs):
    # Memberships go by cascade and announce themselves; a superuser also had every other tenant.
    if instance.is_superuser:
        feed_revoke(user_pk=instance.pk, tenant_pks=Tenant.objects.values_list("pk", flat=True))


@receiver(user_logged_out, dispatch_uid="console.feed.signed_out")
def signed_out(sender, request, user, **kwargs):
    # Sent before the session is flushed, so its key is still the one the sockets joined with.
    session_key = getattr(getattr(request, "session", None), "session_key", None)
    if session_key:
        publish_soon([(session_group_name(session_key), {"type": "session.ended"})])
