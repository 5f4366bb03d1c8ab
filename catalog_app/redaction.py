"""Nothing the CLI prints shows a credential a URL carried: every `error:`/`hint:` line and every log record
passes through `catalog.urls.redact` (a mirror URL with `user:password@`, an endpoint with `?token=`)."""

from __future__ import annotations

import logging

from catalog.urls import redact


class RedactingFilter(logging.Filter):
    """Rewrites each record's message with credentials in URLs hidden (the record is formatted once, here)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        hidden = redact(message)
        if hidden != message:
            record.msg, record.args = hidden, ()
        return True


def install(logger: logging.Logger | None = None) -> None:
    """Add the filter to every handler of `logger` (default: the root logger), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
