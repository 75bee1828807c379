"""Teammate on Discord (discord.py): payload translation, presentation, wiring."""
