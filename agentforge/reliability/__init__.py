"""Surviving real faults: test-only fault points, and a reaper for the processes a killed run leaves behind."""
