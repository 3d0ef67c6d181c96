from tests.comparison.fixtures import adapter_model_fixture  # noqa: F401
from tests.evaluation.fixtures import judge_provider_fixture, scripted_judge_fixture  # noqa: F401,E402
