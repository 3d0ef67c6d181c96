"""Runs classifications inside an `inference` worker: a few classifiers (base + LoRA + head) kept per
worker process, shared by its task threads, each used by one request at a time."""

import logging
import threading
from collections import OrderedDict

from apps.core.jobs import JobRun
from apps.registry.weights import model_paths
from apps.serving.models import Classification

logger = logging.getLogger(__name__)

# Classifiers kept loaded per worker process (least recently used out): each holds its own copy of the
# base, which the generation cache's models cannot share (they have no head).
KEEP_CLASSIFIERS = 2

_lock = threading.Lock()
_classifiers: OrderedDict = OrderedDict()   # adapter path -> (Classifier, its lock)


def _classifier(base, adapter):
    from workers.inference.classify import load_classifier

    key = str(adapter)
    with _lock:
        if key in _classifiers:
            _classifiers.move_to_end(key)
            return _classifiers[key]
    loaded = (load_classifier(base, adapter), threading.Lock())
    with _lock:
        _classifiers[key] = loaded
        while len(_classifiers) > KEEP_CLASSIFIERS:
            _classifiers.popitem(last=False)
        return loaded


def classify_with(model, texts: list[str]) -> list[dict]:
    """For each text, the classifier adapter `model`'s {"label", "probabilities"}: classification jobs
    and a campaign's suggestions from a classifier run here."""
    from workers.inference.classify import classify_texts

    classifier, in_use = _classifier(*model_paths(model))
    with in_use:
        return classify_texts(classifier, texts)


def run_classification(classification_id: int, *, worker: str = "") -> None:
    run = JobRun.claim(Classification, classification_id, worker=worker, what="classification")
    if run is None:
        return  # ended, gone, or run by a live worker (a redelivered message)
    job = Classification.objects.select_related("model__base_model").get(pk=classification_id)
    with run:
        try:
            results = classify_with(job.model, job.texts)
        except Exception as exc:  # a model that cannot load: the caller sees why
            logger.exception("classification %s failed", classification_id)
            run.fail(f"{type(exc).__name__}: {exc}"[:2000])
            return
        run.finish(results=results)
