"""The terminal: `teammate ask` and `teammate chat`, a platform without a server."""
