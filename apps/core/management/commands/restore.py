"""`manage.py restore DIR`: a backup made by `manage.py backup` put back (apps/core/backup.py).
Stop the web and the workers first."""

from pathlib import Path

from django.core.management import BaseCommand, CommandError

from apps.core import backup


class Command(BaseCommand):
    help = "Restore a backup made by `manage.py backup` (stop the web and the workers first)."

    def add_arguments(self, parser):
        parser.add_argument("source", type=Path, help="the backup's folder")
        parser.add_argument("--force", action="store_true",
                            help="replace a database that already holds users or projects")

    def handle(self, *args, source: Path, force: bool, **options):
        try:
            manifest = backup.restore(source, force=force)
        except backup.BackupError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"restored the backup of {manifest['created_at']} from {source}")
