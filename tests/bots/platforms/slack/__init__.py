"""Tests of the Slack adapter."""
