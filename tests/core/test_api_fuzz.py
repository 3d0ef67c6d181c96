"""Schemathesis on the OpenAPI schema generated from the code, against the real ASGI server: for
every operation, a bounded number of generated requests (a project owner's token, the project's
real id in its paths) never gets a 500, and every documented answer matches its schema and
content type. (Schemathesis's own pytest plugin does not run under pytest 9, so each operation
is a parametrized test driving its Hypothesis strategy here.)"""

from datetime import timedelta

import pytest
import schemathesis
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from apps.accounts import services as account_services
from apps.projects.permissions import PERMISSIONS

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

SCHEMA = schemathesis.openapi.from_dict(SchemaGenerator().get_schema(request=None, public=True))
OPERATIONS = [result.ok().label for result in SCHEMA.get_all_operations()]
EXAMPLES_PER_OPERATION = 6


@pytest.mark.parametrize("label", OPERATIONS)
def test_generated_requests_get_no_server_error_and_answers_match_the_schema(label, live_asgi, owner, project):
    _, token = account_services.token_create(user=owner, name="fuzz", project=project, permissions=sorted(PERMISSIONS),
                                             expires_at=timezone.now() + timedelta(hours=1))

    @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, derandomize=True, database=None,
              phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
    @given(case=SCHEMA.find_operation_by_label(label).as_strategy())
    def one_request(case):
        if "project_id" in (case.path_parameters or {}):
            case.path_parameters["project_id"] = project.pk  # past the 404 a made-up id gets
        case.call_and_validate(base_url=live_asgi, headers={"Authorization": f"Bearer {token}"}, timeout=30,
                               checks=[not_a_server_error, response_schema_conformance, content_type_conformance])

    one_request()
