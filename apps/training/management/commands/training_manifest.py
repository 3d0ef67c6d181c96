from django.core.management.base import BaseCommand, CommandError

from apps.training.manifests import KINDS, ManifestError, render_manifest
from apps.training.models import TrainingJob


class Command(BaseCommand):
    help = ("Print a Kubernetes PyTorchJob or JobSet that runs a queued fine-tune on M machines x N GPUs, after "
            "writing its run folder (ddp/spec.json) on the shared volume: "
            "manage.py training_manifest JOB --kind pytorchjob --nodes 2 --devices 8 | kubectl apply -f -")

    def add_arguments(self, parser):
        parser.add_argument("job", help="the fine-tune job's id")
        parser.add_argument("--kind", required=True, help=f"the training job kind: {' or '.join(KINDS)}")
        parser.add_argument("--nodes", required=True, help="machines (pods), at least 1")
        parser.add_argument("--devices", required=True, help="GPUs per machine, at least 1")
        parser.add_argument("--image", default="", help="the gpu workers' image (default: the template's "
                                                        "workbench-gpu, which deploy/k8s/kustomization.yaml maps)")

    def handle(self, *args, job, kind, nodes, devices, image, **options):
        try:
            job_id = int(job)
        except ValueError:
            raise CommandError(f"job: a job id (a whole number), not {job[:80]!r}.") from None
        numbers = {}
        for name, value in (("nodes", nodes), ("devices", devices)):
            try:
                numbers[name] = int(value)
            except ValueError:
                raise CommandError(f"--{name}: a whole number of at least 1, not {value[:80]!r}.") from None
        found = TrainingJob.objects.filter(pk=job_id).first()
        if found is None:
            raise CommandError(f"job: no fine-tune job {job_id}.")
        try:
            manifest = render_manifest(found, kind=kind, image=image, **numbers)
        except ManifestError as exc:
            where = "job" if exc.field == "job" else f"--{exc.field}"
            raise CommandError(f"{where}: {exc.message}") from None
        self.stdout.write(manifest, ending="")
