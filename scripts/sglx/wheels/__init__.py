"""Frozen wheels: locks generated from the profile, wheelhouses filled and verified offline."""
