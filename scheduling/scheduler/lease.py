"""One admission cycle per domain at a time: a lease row with expiry, and a fence.

Kueue runs one scheduler per cluster. Here any number of Celery workers may try to run the
cycle of the same domain; the lease (a conditional UPDATE on ``AdmissionLease``) lets one
through, and expires so that a dead worker's domain is taken over. Because a slow holder
could outlive its lease, the apply step also *fences*: inside its transaction it locks the
lease row and checks it still holds it, so two cycles can never both write decisions.

Rows are locked FOR NO KEY UPDATE here and everywhere else (``select_for_update(no_key=True)``):
the holders still exclude each other, and the foreign-key checks of inserts that reference
the row (FOR KEY SHARE) do not wait for them. Only a transaction that deletes a row or
changes its key needs FOR UPDATE, and PostgreSQL takes it for that statement itself.
"""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Q

from scheduling.models import AdmissionLease


def new_holder_id() -> str:
    """A holder id unique to this attempt: host, process and a random part."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def acquire(cluster_id: int, holder: str, *, now: datetime, duration: timedelta) -> bool:
    """Take the domain's lease if it is free, expired, or already ours.

    Taking it clears ``wanted``: the cycle about to run sees every change committed so far.
    """
    if _take(cluster_id, holder, now=now, duration=duration):
        return True
    # Held by another worker, or the domain's first cycle: its row does not exist yet.
    return _ensure_row(cluster_id) and _take(cluster_id, holder, now=now, duration=duration)


def _take(cluster_id: int, holder: str, *, now: datetime, duration: timedelta) -> bool:
    taken = (
        AdmissionLease.objects.filter(cluster_id=cluster_id)
        .filter(Q(expires_at__isnull=True) | Q(expires_at__lte=now) | Q(holder=holder))
        .update(holder=holder, expires_at=now + duration, wanted=False)
    )
    return taken == 1


def acquire_or_defer(cluster_id: int, holder: str, *, now: datetime,
                     duration: timedelta) -> bool:
    """``acquire``, or else leave the holder a note that another cycle is wanted.

    The note is written before a second attempt, so either this caller gets the lease (the
    holder released it meanwhile) or the holder finds the note when it releases: a request
    for a cycle is never dropped because another worker was busy with the domain.
    """
    if acquire(cluster_id, holder, now=now, duration=duration):
        return True
    AdmissionLease.objects.filter(cluster_id=cluster_id).update(wanted=True)
    return acquire(cluster_id, holder, now=now, duration=duration)


def release(cluster_id: int, holder: str) -> bool:
    """Give the lease back at once (if still ours) so the next cycle need not wait.

    Returns whether another cycle was asked for while we held it. The row is locked, so a
    concurrent ``acquire_or_defer`` writes its note either before (we see it) or after (it
    then takes the free lease itself).
    """
    with transaction.atomic():
        lease = (AdmissionLease.objects.select_for_update(no_key=True)
                 .filter(cluster_id=cluster_id, holder=holder).first())
        if lease is None:
            return False
        return _free(lease)


def held_lease(cluster_id: int, holder: str, *, now: datetime) -> AdmissionLease | None:
    """Inside a transaction: lock the lease row; the lease if ``holder`` still holds it."""
    lease = AdmissionLease.objects.select_for_update(no_key=True).filter(cluster_id=cluster_id).first()
    if (lease is not None and lease.holder == holder and lease.expires_at is not None
            and lease.expires_at > now):
        return lease
    return None


def hand_back(lease: AdmissionLease, *, cycle: int) -> bool:
    """Inside the transaction that locked ``lease`` (``held_lease``): record the domain's
    cycle count and give the lease back, both committed with the cycle's decisions.

    Returns whether another cycle was asked for while it was held, as ``release`` does:
    the row is locked, so a concurrent ``acquire_or_defer`` wrote its note before the lock
    (read here) or writes it after the commit, and then takes the free lease itself. This
    spares the cycle a transaction of its own for ``release``."""
    return _free(lease, cycle=cycle)


def _free(lease: AdmissionLease, **also: Any) -> bool:
    """Free the locked ``lease`` (and write ``also``); whether a cycle was asked for."""
    AdmissionLease.objects.filter(pk=lease.pk).update(holder="", expires_at=None, wanted=False,
                                                      **also)
    return lease.wanted


def _ensure_row(cluster_id: int) -> bool:
    """Create the domain's lease row if it is missing; whether it was missing."""
    if AdmissionLease.objects.filter(cluster_id=cluster_id).exists():
        return False
    try:
        with transaction.atomic():
            AdmissionLease.objects.create(cluster_id=cluster_id)
    except IntegrityError:
        pass  # another worker created it first
    return True
