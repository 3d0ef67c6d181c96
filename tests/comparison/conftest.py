from tests.comparison.fixtures import adapter_model_fixture  # noqa: F401
