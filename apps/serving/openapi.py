"""The OpenAI-compatible API (/v1, apps/serving/openai_api.py) in the OpenAPI document.

Its views are plain async Django views (DRF has no async views), so drf-spectacular cannot read
them: a postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]) adds their paths and
schemas, written here beside the code they describe. Only what is supported is documented; the
refused options (tools, logit_bias) answer a 400 naming the field.
"""

TAG = "openai"

def _ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def _nullable_int(low: int, high: int) -> dict:
    return {"type": "integer", "minimum": low, "maximum": high, "nullable": True}


def _nullable_number(low: float, high: float) -> dict:
    return {"type": "number", "minimum": low, "maximum": high, "nullable": True}


SAMPLING = {
    "max_tokens": {**_nullable_int(1, 8192), "description": "At most this many new tokens."},
    "temperature": {**_nullable_number(0, 5), "description": "0 is greedy decoding."},
    "top_p": {"type": "number", "exclusiveMinimum": True, "minimum": 0, "maximum": 1, "nullable": True},
    "top_k": {**_nullable_int(0, 100000), "description": "Not OpenAI's: 0 is off."},
    "stop": {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 200},
                       {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 200},
                        "maxItems": 8}], "nullable": True},
    "seed": {**_nullable_int(0, 2**63 - 1), "description": "Choice i of n samples with seed + i."},
    "n": {**_nullable_int(1, 8), "description": "Choices, each generated on its own."},
    "stream": {"type": "boolean", "nullable": True},
    "stream_options": {"type": "object", "nullable": True, "additionalProperties": False,
                       "properties": {"include_usage": {"type": "boolean"}},
                       "description": "Only with stream: a last chunk with the usage and no choices."},
    "presence_penalty": _nullable_number(-2, 2),
    "frequency_penalty": _nullable_number(-2, 2),
    "user": {"type": "string", "maxLength": 256,
             "description": "The end user: keeps them on one side of an alias's canary split."},
}
TEXT_PART = {"type": "object", "required": ["type", "text"],
             "properties": {"type": {"type": "string", "enum": ["text"]}, "text": {"type": "string"}}}
MESSAGE = {"type": "object", "required": ["role", "content"], "additionalProperties": False,
           "properties": {"role": {"type": "string", "enum": ["system", "developer", "user", "assistant"],
                                   "description": "developer is the system role."},
                          "content": {"oneOf": [{"type": "string"},
                                                {"type": "array", "items": _ref("OpenAITextPart"), "minItems": 1}],
                                      "description": "Text, or text parts (joined by newlines)."}}}
TOKEN_LOGPROB = {"type": "object", "required": ["token", "logprob", "bytes"],
                 "properties": {"token": {"type": "string"}, "logprob": {"type": "number"},
                                "bytes": {"type": "array", "items": {"type": "integer"}, "nullable": True}}}
USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
         "properties": {name: {"type": "integer"} for name in ("prompt_tokens", "completion_tokens", "total_tokens")}}
FINISH = {"type": "string", "enum": ["stop", "length", "cancelled"], "nullable": True}
ENVELOPE = {"id": {"type": "string"}, "object": {"type": "string"}, "created": {"type": "integer"},
            "model": {"type": "string"}}

FINGERPRINT = {"type": "string", "description": "The backend configuration that answered: workbench-<the precision "
                                              "the model was loaded in> (fp32, bf16, int8)."}

SCHEMAS = {
    "OpenAIError": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["message", "type", "param", "code"],
        "properties": {"message": {"type": "string"}, "type": {"type": "string"},
                       "param": {"type": "string", "nullable": True,
                                 "description": "The request's field at fault, as the request named it."},
                       "code": {"type": "string", "nullable": True, "description": (
                           "model_not_found, invalid_api_key, context_length_exceeded, rate_limit_exceeded, "
                           "unknown_url, or null.")}}}}},
    "OpenAIModel": {"type": "object", "required": ["id", "object", "created", "owned_by", "name"], "properties": {
        "id": {"type": "string", "description": "What to send as `model`: the name as a slug, slug@alias for an "
                                                "alias. The display name is accepted too."},
        "object": {"type": "string", "enum": ["model"]}, "created": {"type": "integer"},
        "owned_by": {"type": "string"}, "name": {"type": "string", "description": "The display name."}}},
    "OpenAIModelList": {"type": "object", "required": ["object", "data"], "properties": {
        "object": {"type": "string", "enum": ["list"]}, "data": {"type": "array", "items": _ref("OpenAIModel")}}},
    "OpenAITextPart": TEXT_PART,
    "OpenAIChatMessage": MESSAGE,
    "OpenAIChatCompletionRequest": {"type": "object", "required": ["model", "messages"], "properties": {
        "model": {"type": "string", "minLength": 1},
        "messages": {"type": "array", "items": _ref("OpenAIChatMessage"), "minItems": 1},
        **SAMPLING,
        "max_completion_tokens": {**_nullable_int(1, 8192), "description": "The newer name of max_tokens."},
        "logprobs": {"type": "boolean", "nullable": True},
        "top_logprobs": {**_nullable_int(0, 20), "description": "Needs logprobs: true."},
        "response_format": {"type": "object", "nullable": True, "required": ["type"], "properties": {
            "type": {"type": "string", "enum": ["text", "json_object", "json_schema"]},
            "json_schema": {"type": "object", "required": ["schema"], "properties": {
                "name": {"type": "string"}, "schema": {"type": "object"}, "strict": {"type": "boolean"}}}},
            "description": "json_object: the answer is a JSON object; json_schema: JSON valid against "
                           "json_schema.schema (constrained as it is generated)."}}},
    "OpenAICompletionRequest": {"type": "object", "required": ["model", "prompt"], "properties": {
        "model": {"type": "string", "minLength": 1},
        "prompt": {"oneOf": [{"type": "string", "minLength": 1},
                             {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                              "maxItems": 1}]},
        **SAMPLING,
        "logprobs": {**_nullable_int(0, 5), "description": "Log-probabilities, with this many alternatives."}}},
    "OpenAIChatCompletion": {"type": "object", "required": [*ENVELOPE, "choices", "usage"], "properties": {
        **ENVELOPE, "usage": USAGE, "system_fingerprint": FINGERPRINT,
        "choices": {"type": "array", "items": {
            "type": "object", "required": ["index", "message", "finish_reason"], "properties": {
                "index": {"type": "integer"}, "finish_reason": FINISH,
                "message": {"type": "object", "required": ["role", "content"], "properties": {
                    "role": {"type": "string", "enum": ["assistant"]}, "content": {"type": "string"}}},
                "logprobs": {"type": "object", "nullable": True, "properties": {"content": {
                    "type": "array", "items": {**TOKEN_LOGPROB, "properties": {
                        **TOKEN_LOGPROB["properties"],
                        "top_logprobs": {"type": "array", "items": TOKEN_LOGPROB}}}}}}}}}}},
    "OpenAICompletion": {"type": "object", "required": [*ENVELOPE, "choices", "usage"], "properties": {
        **ENVELOPE, "usage": USAGE, "system_fingerprint": FINGERPRINT,
        "choices": {"type": "array", "items": {
            "type": "object", "required": ["index", "text", "finish_reason"], "properties": {
                "index": {"type": "integer"}, "text": {"type": "string"}, "finish_reason": FINISH,
                "logprobs": {"type": "object", "nullable": True, "properties": {
                    "tokens": {"type": "array", "items": {"type": "string"}},
                    "token_logprobs": {"type": "array", "items": {"type": "number"}},
                    "top_logprobs": {"type": "array", "items": {"type": "object",
                                                                "additionalProperties": {"type": "number"}}},
                    "text_offset": {"type": "array", "items": {"type": "integer"}}}}}}}}},
    "OpenAIFeedbackRequest": {"type": "object", "required": ["completion_id", "score"], "properties": {
        "completion_id": {"type": "string", "description": "the id of the answer (chatcmpl-… or cmpl-…)"},
        "choice_index": {"type": "integer", "minimum": 0, "default": 0,
                         "description": "which of the answer's choices (a request with n > 1 has n)"},
        "score": {"type": "number", "minimum": -1000, "maximum": 1000},
        "comment": {"type": "string", "maxLength": 2000, "nullable": True}}},
    "OpenAIFeedback": {"type": "object", "required": ["completion_id", "choice_index", "recorded"], "properties": {
        "completion_id": {"type": "string"}, "choice_index": {"type": "integer"}, "recorded": {"type": "boolean"}}},
}


def _answer(schema: str, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": _ref(schema)}}}


def _errors(*statuses: int) -> dict:
    described = {400: "A bad request: `param` names the field.", 401: "No valid API token (WWW-Authenticate).",
                 403: "The token lacks the permission, or is not scoped to a project.",
                 404: "No such model (code model_not_found).", 413: "The body is too large.",
                 429: "The token's rate limit (Retry-After)."}
    return {str(status): _answer("OpenAIError", described[status]) for status in statuses}


def _generation(request: str, response: str, summary: str) -> dict:
    return {"post": {
        "operationId": f"openai_{request}", "tags": [TAG], "summary": summary,
        "description": "The token's project serves its ready models. With stream: true the answer is "
                       "server-sent events (chunks, then `data: [DONE]`).",
        "security": [{"bearerToken": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref(request)}}},
        "responses": {"200": {"description": "The answer (or its stream).", "content": {
            "application/json": {"schema": _ref(response)}, "text/event-stream": {"schema": {"type": "string"}}}},
            **_errors(400, 401, 403, 404, 413, 429)}}}


PATHS = {
    "/v1/models": {"get": {
        "operationId": "openai_models_list", "tags": [TAG], "summary": "The models a client may ask for.",
        "security": [{"bearerToken": []}],
        "responses": {"200": _answer("OpenAIModelList", "Ready models and aliases."), **_errors(401, 403, 429)}}},
    "/v1/models/{model_id}": {"get": {
        "operationId": "openai_models_retrieve", "tags": [TAG], "summary": "One model, by id or display name.",
        "security": [{"bearerToken": []}],
        "parameters": [{"name": "model_id", "in": "path", "required": True, "schema": {"type": "string"}}],
        "responses": {"200": _answer("OpenAIModel", "The model."), **_errors(401, 403, 404, 429)}}},
    "/v1/chat/completions": _generation("OpenAIChatCompletionRequest", "OpenAIChatCompletion",
                                        "Chat completion (OpenAI-compatible)."),
    "/v1/completions": _generation("OpenAICompletionRequest", "OpenAICompletion",
                                   "Text completion (OpenAI-compatible)."),
    "/v1/feedback": {"post": {
        "operationId": "openai_feedback", "tags": [TAG], "summary": "A user's feedback on a captured answer.",
        "description": "Recorded on the answer's capture (its alias logs requests); a comment is redacted like "
                       "the capture. Not part of OpenAI's API.",
        "security": [{"bearerToken": []}],
        "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("OpenAIFeedbackRequest")}}},
        "responses": {"200": _answer("OpenAIFeedback", "Recorded."), **_errors(400, 401, 403, 404, 413, 429)}}},
}


def add_openai_paths(result: dict, generator, request, public) -> dict:
    """drf-spectacular postprocessing hook: the /v1 paths after the others (their tag comes last)."""
    result.setdefault("paths", {}).update(PATHS)
    result.setdefault("components", {}).setdefault("schemas", {}).update(SCHEMAS)
    return result
