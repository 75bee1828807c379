"""Slack adapter: Events API payloads to `Incoming`, a Slack `Surface`, the wiring and manifest."""
