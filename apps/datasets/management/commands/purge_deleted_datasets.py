"""Retention: purge the rows of datasets soft-deleted more than N days ago (run it from cron).
Versions still used by a fine-tune, a comparison or an annotation campaign are kept and listed."""

from django.core.management.base import BaseCommand

from apps.datasets.services import purge_deleted_datasets


class Command(BaseCommand):
    help = "Purge every unpinned version of the datasets deleted more than --days days ago."

    def add_arguments(self, parser):
        parser.add_argument("--days", type=int, default=30, help="retention after a soft delete (default 30)")

    def handle(self, *args, days: int, **options):
        if days < 0:
            self.stderr.write("--days must be 0 or more.")
            raise SystemExit(2)
        outcome = purge_deleted_datasets(older_than_days=days)
        self.stdout.write(f"{outcome['purged']} version(s) queued for purging.")
        for kept in outcome["kept"]:
            self.stdout.write(f"kept dataset {kept['dataset']} v{kept['version']}: {kept['reason']}")
