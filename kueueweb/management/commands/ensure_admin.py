"""Make sure a fresh install can be signed in to: create the first superuser once.

With no superuser in the database, creates ``admin`` with the password in
``KUEUEWEB_ADMIN_PASSWORD``, or with a generated one that is printed once, now, and never
again. With a superuser already there it changes nothing and prints nothing secret, so
``make run`` can call it on every start.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from kueueweb.roles import GROUP_NAMES, Role

PASSWORD_ENV = "KUEUEWEB_ADMIN_PASSWORD"


class Command(BaseCommand):
    help = (
        f"Create the superuser 'admin' if there is no superuser (password from {PASSWORD_ENV}, "
        "or generated and printed once)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="Name of the user to create.")

    def handle(self, *args: Any, **options: Any) -> None:
        users = get_user_model()
        username: str = options["username"]
        if users.objects.filter(is_superuser=True).exists():
            self.stdout.write("A superuser exists already: nothing to do.")
            return
        if users.objects.filter(username=username).exists():
            # Promoting an existing account would hand admin rights to whoever knows its
            # password; leave it to a person.
            self.stderr.write(self.style.WARNING(
                f"No superuser exists, but a user named {username!r} does: not changing it. "
                "Create one with `python manage.py createsuperuser`."
            ))
            return

        password = os.environ.get(PASSWORD_ENV, "")
        generated = not password
        if generated:
            password = secrets.token_urlsafe(18)
        else:
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError(f"{PASSWORD_ENV}: {' '.join(exc.messages)}") from exc

        with transaction.atomic():
            user = users.objects.create_superuser(username=username, email="", password=password)
            group = Group.objects.filter(name=GROUP_NAMES[Role.ADMIN]).first()
            if group is not None:
                user.groups.add(group)

        if generated:
            rule = "=" * 64
            self.stdout.write(self.style.SUCCESS(
                f"{rule}\n"
                f"Created the superuser for the admin console and the UI:\n"
                f"    username: {username}\n"
                f"    password: {password}\n"
                f"This password is shown only this once. Set {PASSWORD_ENV} before the first\n"
                f"start to choose it; change it later at /admin/password_change/.\n"
                f"{rule}"
            ))
        else:
            self.stdout.write(self.style.SUCCESS(
                f"Created the superuser {username!r} with the password from {PASSWORD_ENV}."
            ))
