"""The keys of a ``make run`` installation, generated once and kept under var/.

``make run`` serves with DEBUG off, so it needs a SECRET_KEY and a kubeconfig encryption key
of its own: this command writes each, if missing, to a file readable by its owner only (mode
0600) in the installation's var/ directory (``KUEUEWEB_VAR_DIR``), and ``make run`` hands
them to every process as ``SECRET_KEY_FILE`` and ``KUEUEWEB_ENCRYPTION_KEY_FILE``.

An installation from before kept its kubeconfigs under the key derived from the public
development SECRET_KEY, which anybody holding the database file could use. Each kubeconfig
that key opens is re-encrypted under the installation's key, all in one transaction, so it
stays readable and is no longer open to the public key; one that neither key opens is left
as it is and counted. Run it with the development settings (no keys set), the ones those
kubeconfigs were stored under.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from django.apps import apps
from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import connection, transaction

from kueueweb.env import derived_fernet_key

SECRET_KEY_FILE = "secret_key"
ENCRYPTION_KEY_FILE = "encryption_key"


def ensure_key_file(path: Path, generate: Any) -> tuple[str, bool]:
    """The key in ``path`` and whether it was created now; only the owner may read it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        return path.read_text().strip(), False
    value = str(generate())
    with os.fdopen(descriptor, "w") as out:
        out.write(value + "\n")
    return value, True


def reencrypt_kubeconfigs(old_key: str, new_key: str) -> tuple[int, int]:
    """Kubeconfigs under ``old_key`` moved to ``new_key``: (moved, unreadable by either)."""
    cluster_model = apps.get_model("multicluster", "Cluster")
    if cluster_model._meta.db_table not in connection.introspection.table_names():
        return 0, 0  # a fresh installation: nothing stored yet
    old, new = Fernet(old_key.encode()), Fernet(new_key.encode())
    moved = unreadable = 0
    with transaction.atomic():
        stored = (cluster_model.objects.select_for_update().exclude(kubeconfig_encrypted="")
                  .values_list("pk", "kubeconfig_encrypted"))
        for pk, token in stored:
            try:
                new.decrypt(token.encode())
                continue  # already under the installation's key
            except InvalidToken:
                pass
            try:
                plaintext = old.decrypt(token.encode())
            except InvalidToken:
                unreadable += 1
                continue
            cluster_model.objects.filter(pk=pk).update(
                kubeconfig_encrypted=new.encrypt(plaintext).decode())
            moved += 1
    return moved, unreadable


class Command(BaseCommand):
    help = ("Generate this installation's SECRET_KEY and kubeconfig encryption key into var/ "
            "(once, mode 0600) and move kubeconfigs off the development key.")

    def handle(self, *args: Any, **options: Any) -> None:
        directory = Path(settings.VAR_DIR)
        _, created = ensure_key_file(directory / SECRET_KEY_FILE,
                                     lambda: secrets.token_urlsafe(50))
        if created:
            self.stdout.write(f"Generated this installation's SECRET_KEY in "
                              f"{directory / SECRET_KEY_FILE}.")
        key, created = ensure_key_file(directory / ENCRYPTION_KEY_FILE,
                                       lambda: Fernet.generate_key().decode())
        if created:
            self.stdout.write(f"Generated this installation's kubeconfig encryption key in "
                              f"{directory / ENCRYPTION_KEY_FILE}.")
        legacy = derived_fernet_key(settings.SECRET_KEY)
        if legacy != settings.KUEUEWEB_ENCRYPTION_KEY:
            return  # the environment names a key of its own, which serves instead
        moved, unreadable = reencrypt_kubeconfigs(legacy, key)
        if moved:
            self.stdout.write(f"Re-encrypted {moved} kubeconfig(s) stored under the development "
                              f"key with this installation's key.")
        if unreadable:
            self.stderr.write(
                f"{unreadable} stored kubeconfig(s) open with neither the development key nor "
                f"{directory / ENCRYPTION_KEY_FILE}: left as they are. Serve with the "
                f"KUEUEWEB_ENCRYPTION_KEY they were stored under, or upload them again.")
