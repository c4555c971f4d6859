"""Picklable recipes: what another process (a worker, a Ray actor) needs to score like we do.

A live judge cannot cross a process boundary (its HTTP clients hold locks and sockets), so we
send how to build it instead: a :class:`JudgeRecipe` (model, endpoint, options) and a
:class:`ScoringRecipe` (judge-less copies of the metrics plus the engine's options). The
receiving process builds one judge per distinct recipe and one engine, once.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from langchain_ragmetrics._engine import ScoringEngine
from langchain_ragmetrics.metrics import BaseRagMetric, JudgedMetric
from langchain_ragmetrics.metrics._judge import DEFAULT_JUDGE_MODEL, DEFAULT_JUDGE_TIMEOUT

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import RunnableConfig

__all__ = ["JudgeRecipe", "ScoringRecipe"]

_LIVE_FIELDS = ("http_client", "http_async_client", "rate_limiter", "callbacks")
"""Chat-model fields that hold live objects, which ``dumpd`` silently leaves out."""


class _RecipeError(ValueError):
    """Something cannot be sent to another process: the reason, then what to do about it.

    The reason stands alone (the callback handler's fallback warning quotes it); the advice
    is for ``evaluate(workers=...)`` and Ray, where ``workers=1`` is the way out.
    """

    def __init__(self, reason: str, advice: str) -> None:
        super().__init__(f"{reason}; {advice}")
        self.reason = reason
        self.advice = advice


class JudgeRecipe(BaseModel):
    """How to build a judge in another process: never a live client.

    Either the arguments of the package's judge factory (``model``, ``base_url``, ...), or a
    LangChain-serialized chat model (``serialized``, from :func:`langchain_core.load.dumpd`)
    with the secret values it refers to.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = DEFAULT_JUDGE_MODEL
    """Model name for the package's ``ChatOpenAI`` judge."""
    base_url: str | None = None
    """OpenAI-compatible endpoint; None: ``$OPENAI_BASE_URL`` of the receiving process."""
    api_key: SecretStr | None = None
    """API key; None: ``$OPENAI_API_KEY`` of the receiving process."""
    timeout: float = Field(default=DEFAULT_JUDGE_TIMEOUT, gt=0)
    """Seconds per HTTP request."""
    serialized: dict[str, Any] | None = None
    """A chat model serialized by LangChain (``dumpd``); when set, the fields above are unused."""
    secrets: dict[str, SecretStr] = Field(default_factory=dict)
    """Secret values of ``serialized`` by their id (e.g. ``OPENAI_API_KEY``)."""

    @classmethod
    def from_llm(cls, llm: BaseChatModel) -> JudgeRecipe:
        """The recipe of a live chat model (LangChain-serializable ones: ChatOpenAI and most).

        Raises:
            _RecipeError: The model cannot be serialized by LangChain, or holds live objects a
                serialized model would silently lose (its own HTTP client, rate limiter or
                callbacks).
        """
        from langchain_core.load import dumpd

        serializable = getattr(type(llm), "is_lc_serializable", None)
        serialized = dumpd(llm) if callable(serializable) and serializable() else None
        if serialized is None or serialized.get("type") != "constructor":
            raise _RecipeError(
                f"the judge {type(llm).__name__} cannot be rebuilt in another process (LangChain "
                "cannot serialize it)",
                "use a serializable chat model such as ChatOpenAI, or workers=1",
            )
        live = [name for name in _LIVE_FIELDS if getattr(llm, name, None) is not None]
        if live:
            raise _RecipeError(
                f"the judge {type(llm).__name__}'s {', '.join(live)} cannot be sent to another "
                "process (LangChain leaves live objects out of a serialized model, so the "
                "rebuilt judge would differ)",
                "drop it from the judge, or use workers=1",
            )
        secrets: dict[str, SecretStr] = {}
        for attr, secret_id in llm.lc_secrets.items():
            value = getattr(llm, attr, None)
            if isinstance(value, SecretStr):
                secrets[secret_id] = value
            elif isinstance(value, str):
                secrets[secret_id] = SecretStr(value)
        return cls(serialized=serialized, secrets=secrets)

    def build(self) -> BaseChatModel:
        """A new judge from this recipe (in the process that will use it)."""
        if self.serialized is None:
            from langchain_ragmetrics.metrics._judge import make_judge

            key = None if self.api_key is None else self.api_key.get_secret_value()
            return make_judge(self.model, base_url=self.base_url, api_key=key, timeout=self.timeout)
        from langchain_core.load import load

        secrets = {name: value.get_secret_value() for name, value in self.secrets.items()}
        with warnings.catch_warnings():  # `load` is marked beta; the recipe is our own output
            warnings.simplefilter("ignore")
            model: BaseChatModel = load(
                self.serialized,
                secrets_map=secrets,
                secrets_from_env=True,  # a secret not in the recipe: this process's variable
                allowed_objects="all",
            )
        return model

    def without_secrets(self) -> JudgeRecipe:
        """This recipe with no key in it: the receiving process reads its own environment.

        Used where the recipe goes somewhere a key should not (Ray's object store): the
        package's judge then reads ``OPENAI_API_KEY``, a serialized one its secrets' variables.
        """
        return self.model_copy(update={"api_key": None, "secrets": {}})

    def secret_names(self) -> dict[str, str]:
        """The environment variables this recipe's keys stand for, with their values."""
        if self.serialized is None:
            key = None if self.api_key is None else self.api_key.get_secret_value()
            return {} if key is None else {"OPENAI_API_KEY": key}
        return {name: value.get_secret_value() for name, value in self.secrets.items()}


def _judgeless(metric: BaseRagMetric) -> BaseRagMetric:
    """A fresh copy of ``metric`` with the options its user set, minus its live judge."""
    fields = {name: getattr(metric, name) for name in metric.model_fields_set if name != "llm"}
    return type(metric)(**fields)


class ScoringRecipe:
    """Metrics, judges and engine options, picklable; built into live objects where used.

    Args:
        metrics: The prepared metrics (judges, language and cache filled in).
        max_concurrency: Judge calls at work at once in the receiving process.
        timeout: Seconds before a job is abandoned; None for no limit.
        rate_limit_per_minute: Judge requests per minute for the receiving process.
        raise_exceptions: Raise a job's error instead of recording it.
        config: RunnableConfig for the metric runs; callbacks cannot cross processes.
        default_judge: The judge of LLM-judged metrics that have none (None: the package's
            default judge, from the receiving process's environment).

    Raises:
        _RecipeError: A metric, its judge or the config cannot be sent to another process.
    """

    def __init__(
        self,
        metrics: Sequence[BaseRagMetric],
        *,
        max_concurrency: int = 16,
        timeout: float | None = None,
        rate_limit_per_minute: float | None = None,
        raise_exceptions: bool = False,
        config: RunnableConfig | None = None,
        default_judge: JudgeRecipe | None = None,
    ) -> None:
        if config and config.get("callbacks"):
            raise _RecipeError(
                "config callbacks cannot be sent to worker processes",
                "drop them or use workers=1 (tracing through LANGSMITH_* variables works in "
                "workers)",
            )
        recipes: list[JudgeRecipe] = []
        self.judges: list[int | None] = []
        """Per metric: the index of its judge recipe (None: the metric's default judge)."""
        for metric in metrics:
            if not isinstance(metric, JudgedMetric):
                self.judges.append(None)
                continue
            if metric.llm is not None:
                recipe = JudgeRecipe.from_llm(metric.llm)
            elif default_judge is not None:
                recipe = default_judge
            else:
                self.judges.append(None)
                continue
            if recipe not in recipes:
                recipes.append(recipe)
            self.judges.append(recipes.index(recipe))
        self.judge_recipes = recipes
        self.metrics = [_judgeless(m) for m in metrics]
        self.max_concurrency = max_concurrency
        self.timeout = timeout
        self.rate_limit_per_minute = rate_limit_per_minute
        self.raise_exceptions = raise_exceptions
        self.config: RunnableConfig = dict(config or {})  # type: ignore[assignment]
        try:
            pickle.dumps(self)
        except Exception as exc:
            raise _RecipeError(
                f"the metrics cannot be sent to another process ({type(exc).__name__}: {exc})",
                "define custom metric classes in an importable module, or use workers=1",
            ) from exc

    def split(self, parts: int) -> ScoringRecipe:
        """This recipe with concurrency and rate divided among ``parts`` processes.

        Concurrency is rounded down (at least 1), so ``parts - 1`` shares leave at least one
        share of the slots to the process that hands them out.
        """
        share = object.__new__(ScoringRecipe)
        share.__dict__.update(self.__dict__)
        share.max_concurrency = max(1, self.max_concurrency // parts)
        if self.rate_limit_per_minute is not None:
            share.rate_limit_per_minute = self.rate_limit_per_minute / parts
        return share

    def without_secrets(self) -> ScoringRecipe:
        """This recipe with its judges' keys left out (see :meth:`JudgeRecipe.without_secrets`)."""
        share = object.__new__(ScoringRecipe)
        share.__dict__.update(self.__dict__)
        share.judge_recipes = [recipe.without_secrets() for recipe in self.judge_recipes]
        return share

    def secret_names(self) -> dict[str, str]:
        """Every key the judges' recipes hold, by the environment variable it stands for.

        Raises:
            ValueError: Two judges hold different keys for the same variable (one process
                environment cannot give each its own).
        """
        names: dict[str, str] = {}
        for recipe in self.judge_recipes:
            for name, value in recipe.secret_names().items():
                if names.get(name, value) != value:
                    msg = (
                        f"two judges hold different keys for {name}, which the receiving "
                        "process reads from one environment variable: give them the same key"
                    )
                    raise ValueError(msg)
                names[name] = value
        return names

    def build_metrics(self) -> list[BaseRagMetric]:
        """Live metrics: one judge per distinct recipe, shared by the metrics that use it."""
        judges = [recipe.build() for recipe in self.judge_recipes]
        return [
            metric if index is None else metric.model_copy(update={"llm": judges[index]})
            for metric, index in zip(self.metrics, self.judges, strict=True)
        ]

    def build_engine(self) -> ScoringEngine:
        """A scoring engine with this recipe's options."""
        return ScoringEngine(
            max_concurrency=self.max_concurrency,
            timeout=self.timeout,
            rate_limit_per_minute=self.rate_limit_per_minute,
            raise_exceptions=self.raise_exceptions,
            config=self.config,
        )
