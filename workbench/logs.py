"""Log records as JSON lines (LOG_FORMAT=json), for log shippers (Fluent Bit, Vector, Loki's
promtail) that read a container's output: one object per line, its fields named, the traceback
a field of its own rather than lines that would be read as separate records."""

import json
import logging
from datetime import UTC, datetime

# The attributes every LogRecord has; anything else on a record came from `extra=`.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "process": record.process,
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        for name, value in vars(record).items():
            if name not in _STANDARD and name not in entry:
                entry[name] = value
        return json.dumps(entry, default=str, ensure_ascii=False)
