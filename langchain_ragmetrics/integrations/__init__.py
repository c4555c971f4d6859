"""Adapters to other tools; import the one you need (``integrations.langsmith``)."""
