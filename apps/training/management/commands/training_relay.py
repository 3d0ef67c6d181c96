import os
import socket

from django.core.management.base import BaseCommand, CommandError

from apps.training.models import TrainingJob
from apps.training.runner import run_on_cluster


class Command(BaseCommand):
    help = ("Relay a fine-tune that a cluster runs (the relay Job that `manage.py training_manifest` prints): "
            "claim it, hand its events to the job's row, stop it when cancelled, register its adapter.")

    def add_arguments(self, parser):
        parser.add_argument("job", help="the fine-tune job's id")

    def handle(self, *args, job, **options):
        try:
            job_id = int(job)
        except ValueError:
            raise CommandError(f"job: a job id (a whole number), not {job[:80]!r}.") from None
        found = TrainingJob.objects.filter(pk=job_id).only("info").first()
        if found is None:
            raise CommandError(f"job: no fine-tune job {job_id}.")
        if not found.info.get("cluster"):
            raise CommandError(f"job: job {job_id} is not run by a cluster (render it with training_manifest).")
        if not run_on_cluster(job_id, worker=f"cluster-relay@{socket.gethostname()}", pid=os.getpid()):
            raise CommandError(f"job: job {job_id} could not be claimed: it ended, or a live relay holds it.")
        found.refresh_from_db(fields=["state", "error"])
        self.stdout.write(f"job {job_id} {found.state}" + (f": {found.error}" if found.error else "") + "\n")
