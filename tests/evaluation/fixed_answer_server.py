"""A small OpenAI-compatible server that answers from a script: a scripted judge for tests, run
in its own process (`python -m tests.evaluation.fixed_answer_server SCRIPT`), speaking the real
protocol over HTTP to the real client.

SCRIPT is a JSON file, read again on every request so a test can change it:
    {"rules": [{"pattern": regex, "content": text} | {"pattern": regex, "status": 500, "message": text}],
     "default": {...one answer as in a rule...}}
An answer with "delay_s" is sent that many seconds late (a slow provider).
The first rule whose pattern (re.DOTALL) is found in the last user message answers. Every
request is appended to SCRIPT + ".log" (one JSON line: the model, that user message, and
`in_flight`: the requests being answered when it arrived, itself included). Usage is
fixed (10 prompt tokens, 5 completion tokens a call) so totals can be checked by hand. The port
is printed on the first line of stdout.
"""

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PROMPT_TOKENS, COMPLETION_TOKENS = 10, 5


def main(script_path: str) -> None:
    lock, in_flight = threading.Lock(), [0]

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._send(200, {"object": "list", "data": [{"id": "judge-1", "object": "model", "owned_by": "tests"}]})

        def do_POST(self):
            with lock:
                in_flight[0] += 1
                now = in_flight[0]
            try:
                self._answer(now)
            finally:
                with lock:
                    in_flight[0] -= 1

        def _answer(self, now: int):
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            user = [m["content"] for m in request.get("messages", []) if m.get("role") == "user"]
            text = user[-1] if user else ""
            with open(script_path) as handle:
                script = json.load(handle)
            with open(script_path + ".log", "a") as log:
                log.write(json.dumps({"model": request.get("model"), "user": text, "in_flight": now}) + "\n")
            answer = next((rule for rule in script.get("rules", []) if re.search(rule["pattern"], text, re.DOTALL)),
                          script.get("default") or {"content": ""})
            time.sleep(answer.get("delay_s", 0))
            status = answer.get("status", 200)
            if status != 200:
                self._send(status, {"error": {"message": answer.get("message", "error"), "type": "server_error"}})
                return
            self._send(200, {
                "id": "chatcmpl-fixed", "object": "chat.completion", "created": 0, "model": request.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": answer["content"]},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                          "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1])
