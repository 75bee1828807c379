"""Developer tools that are not part of Teammate (mutation testing)."""
