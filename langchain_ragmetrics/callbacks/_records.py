"""Where the handler's records used to live; they are in :mod:`langchain_ragmetrics._retrieval`.

Kept so that ``from langchain_ragmetrics.callbacks._records import OnlineResult`` still works.
"""

from langchain_ragmetrics._retrieval import Capture, OnlineResult

__all__ = ["Capture", "OnlineResult"]
