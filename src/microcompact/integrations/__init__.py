"""Adapters for the frameworks people build agents with: one module each, importing its framework lazily.

``pydantic_ai`` (a history processor), ``langchain`` (``MicroCompactMiddleware``, a drop-in for
``SummarizationMiddleware``) and ``openai_agents`` (a ``Session`` backed by the store, plus a model input
filter). Each hands the framework's full list to :class:`HistoryCompactor` and gets the compacted view back;
the framework keeps its own full history.
"""

from .compactor import HistoryCompactor, ViewEntry, opening_key

__all__ = ["HistoryCompactor", "ViewEntry", "opening_key"]
