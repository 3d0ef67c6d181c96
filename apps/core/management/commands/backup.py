"""`manage.py backup DIR`: the database, the artifact folders and the bucket into DIR (apps/core/backup.py)."""

from pathlib import Path

from django.core.management import BaseCommand, CommandError

from apps.core import backup


class Command(BaseCommand):
    help = "Back up the database, ARTIFACT_ROOT, MEDIA_ROOT and the artifact bucket into a new folder."

    def add_arguments(self, parser):
        parser.add_argument("destination", type=Path, help="a new or empty folder")

    def handle(self, *args, destination: Path, **options):
        fresh = not destination.exists() or not any(destination.iterdir())
        try:
            manifest = backup.backup(destination)
        except backup.BackupError as exc:
            if fresh:
                backup.remove_partial(destination)
            raise CommandError(str(exc)) from None
        except BaseException:
            if fresh:
                backup.remove_partial(destination)
            raise
        size = sum(entry["bytes"] for entry in manifest["files"].values())
        self.stdout.write(f"backed up {len(manifest['files'])} files ({size:,} bytes) into {destination}")
