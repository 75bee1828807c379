"""What Teammate does for a channel, on every platform alike: memory, channel configuration,
schedules (and their scheduler), the tools bound to a run's channel, and the commands and
clicks read into calls on the runner, answered with texts a platform only has to show.
"""
