"""Celery tasks of judges, eval suites and teachers: their runs on an `inference` worker
(apps.core.tasks reaps those whose worker vanished); the periodic scoring of canaries' answers by their
alias's quality judge."""

from celery import shared_task


@shared_task(name="evaluation.judge_run", bind=True)
def judge_run_task(self, run_id: int) -> None:
    from apps.evaluation.runner import run_judge_job

    run_judge_job(run_id, worker=self.request.hostname or "")


@shared_task(name="evaluation.eval_run", bind=True)
def eval_run_task(self, run_id: int) -> None:
    from apps.evaluation.runner import run_eval_job

    run_eval_job(run_id, worker=self.request.hostname or "")


@shared_task(name="evaluation.teacher_run", bind=True)
def teacher_run_task(self, run_id: int) -> None:
    from apps.evaluation.teacher import run_teacher_job

    run_teacher_job(run_id, worker=self.request.hostname or "")


@shared_task(name="evaluation.canary_judge")
def canary_judge_task() -> int:
    from apps.evaluation.canary_judging import judge_canaries

    return judge_canaries()
