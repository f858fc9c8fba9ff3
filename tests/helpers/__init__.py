"""Helpers shared by test layers (fixture device trees, profile variants, a server runner)."""
