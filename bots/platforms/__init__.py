"""The platforms Teammate lives on, one package each: Slack, Discord, the terminal.

Each implements `bots.platform.Platform` (a translator from its payloads to `Incoming`, a
surface, its client) and is registered in `bots.serve.PLATFORMS`; nothing shared names one.
"""
