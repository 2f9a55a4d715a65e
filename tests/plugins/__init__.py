"""Dummy plugin distributions for the plugin-system tests (installed into a temporary directory)."""
