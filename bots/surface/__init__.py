"""How a run is shown: the contract every platform's surface implements (`contract`), the base
that dispatches its events to hooks (`base`), the feed that gives each surface its own queue and
task (`feed`), and what surfaces share: the narration shown while a run works, the throttle,
and Markdown split at a platform's size limit.
"""
