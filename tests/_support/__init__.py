"""Loopback test servers and fixtures shared by the test suite."""
