"""Tests for langchain_ragmetrics."""
