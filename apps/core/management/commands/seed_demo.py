"""Create the demo admin and the demo project once; print how to log in every time."""

import os
import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import BaseCommand
from django.db import transaction

from apps.projects.models import Project
from apps.projects.services import project_create

DEMO_USERNAME = "admin"
DEMO_PROJECT = "Demo project"


class Command(BaseCommand):
    help = "Create the demo admin account and demo project (idempotent)."

    def handle(self, *args, **options):
        password_file = settings.DATA_DIR / "demo-admin-password"
        User = get_user_model()
        with transaction.atomic():
            admin = User.objects.filter(username=DEMO_USERNAME).first()
            if admin is None:
                password = secrets.token_urlsafe(12)
                admin = User.objects.create_superuser(DEMO_USERNAME, email="", password=password)
                fd = os.open(password_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as handle:
                    handle.write(password)
            if not Project.objects.filter(memberships__user=admin, name=DEMO_PROJECT).exists():
                project_create(user=admin, name=DEMO_PROJECT,
                               description="A sandbox project with the demo model SmolLM2-135M-Instruct.")
        if password_file.exists():
            self.stdout.write(f"Log in as '{DEMO_USERNAME}' with password '{password_file.read_text().strip()}' "
                              f"(kept in {password_file}).")
        else:
            self.stdout.write(f"Log in as '{DEMO_USERNAME}' with the password you set for it.")
