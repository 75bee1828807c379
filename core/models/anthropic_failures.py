"""What went wrong calling Anthropic, in words people can read, and whether to try again.

Owns: `Failure` (an `ErrorKind`, its message, retryable or not, the server's wait), the mapping
of an HTTP status and API error type to one (`failure_for_status`), `retry_after` (from
`retry-after-ms` / `retry-after`) and `RetryPolicy`, the one policy for how often and how long
to wait. SDK exceptions are told apart in core.models.anthropic (`_classify`), the only module
that imports the SDK; what they carry arrives here as plain values.

Must not: import `anthropic`; put the API key in a message (the model redacts every message).
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass

from core.messages import ErrorKind
from core.models.thinking_binding import BOUND_ELSEWHERE_HINT

DEFAULT_MAX_RETRIES = 4


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to wait before trying a failed call again.

    A server's `retry-after` is honoured up to `max_retry_after_s`; a longer wait is reported
    to the user instead of silently holding the conversation. Without one, the delay doubles
    from `initial_delay_s` up to `max_delay_s`, with jitter.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    initial_delay_s: float = 1.0
    max_delay_s: float = 30.0
    max_retry_after_s: float = 60.0
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    def delay(self, retries_done: int, retry_after: float | None) -> float | None:
        """Seconds to wait before retry number `retries_done + 1`, or None to give up."""
        if retries_done >= self.max_retries:
            return None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after_s else None
        backoff = min(self.initial_delay_s * 2.0**retries_done, self.max_delay_s)
        return backoff * (1.0 - 0.25 * random.random())


@dataclass(frozen=True, slots=True)
class Failure:
    kind: ErrorKind
    message: str
    retryable: bool = False
    retry_after: float | None = None


def retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date), if given."""
    if not headers:
        return None
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(float(value) * scale, 0.0)
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(float(email.utils.mktime_tz(parsed)) - time.time(), 0.0)
    return None


OVERFLOW_HINTS = (
    "prompt is too long",
    "context window",
    "context length",
    "too many tokens",
    "exceed context limit",  # "input length and `max_tokens` exceed context limit: …"
)


class IncompleteStream(Exception):
    """The SSE stream ended without `message_stop`."""


def failure_for_status(
    status: int, error_type: str, detail: str, headers: Mapping[str, str]
) -> Failure:
    """An HTTP error status (or an error event mid-reply, status 200) as a `Failure`; the
    server's `x-should-retry` overrides whether it is retried."""
    retry_after_s = retry_after(headers)
    should_retry = headers.get("x-should-retry")
    where = f"HTTP {status}" if status != 200 else "mid-reply"

    where = f"HTTP {status}" if status != 200 else "mid-reply"

    failure: Failure
    if error_type == "overloaded_error" or status == 529:
        failure = Failure("overloaded", f"Anthropic is overloaded right now ({where}).", True)
    elif error_type == "rate_limit_error" or status == 429:
        failure = Failure("rate_limited", f"Anthropic's rate limit was reached ({where}).", True)
    elif error_type == "authentication_error" or status == 401:
        failure = Failure(
            "authentication", "Anthropic rejected the API key (check ANTHROPIC_API_KEY)."
        )
    elif error_type == "permission_error" or status == 403:
        failure = Failure(
            "authentication", "The Anthropic API key is not allowed to use this model."
        )
    elif error_type == "billing_error" or status == 402:
        failure = Failure("other", "Anthropic refused the request for a billing reason.")
    elif status == 413 or str(error_type) == "request_too_large":
        # The 32 MB body cap (images, in practice), not the context window: compacting the
        # text would not help, and saying "too long" would mislead.
        failure = Failure(
            "invalid_request",
            "The request was larger than Anthropic accepts (32 MB; usually images).",
        )
    elif BOUND_ELSEWHERE_HINT in detail.lower():
        failure = Failure(
            "invalid_request",
            "Anthropic refused the conversation's earlier reasoning (its thinking is bound to "
            "a conversation that has since changed).",
        )
    elif any(hint in detail.lower() for hint in OVERFLOW_HINTS):
        failure = Failure(
            "context_overflow",
            "The conversation is too long for the model"
            + (f": {short(detail)}" if detail else "."),
        )
    elif error_type in ("api_error", "timeout_error") or status >= 500 or status in (408, 409):
        failure = Failure("server", f"Anthropic had an internal error ({where}).", True)
    elif error_type == "not_found_error" or status == 404:
        failure = Failure(
            "invalid_request",
            "Anthropic does not know this model or endpoint"
            + (f": {short(detail)}" if detail else "."),
        )
    else:
        failure = Failure(
            "invalid_request",
            "Anthropic rejected the request" + (f": {short(detail)}" if detail else f" ({where})."),
        )
    retryable = failure.retryable
    if should_retry == "false":
        retryable = False
    elif should_retry == "true":
        retryable = True
    return Failure(failure.kind, failure.message, retryable, retry_after_s)


def short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
