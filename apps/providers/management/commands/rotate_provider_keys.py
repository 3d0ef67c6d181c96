from django.core.management.base import BaseCommand

from apps.providers import services


class Command(BaseCommand):
    help = ("Re-encrypt every provider API key with the first key of PROVIDER_KEYS. Run it after putting a new "
            "key in front, before removing the old one.")

    def handle(self, *args, **options):
        count = services.rotate_keys()
        self.stdout.write(f"Re-encrypted {count} provider key(s) with the primary key.")
