"""``ragmetrics evaluate``: score a dataset file and print the summary table."""

from __future__ import annotations

import argparse
import random
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_ragmetrics._cli._common import (
    ExitCode,
    add_judge_options,
    build_judge,
    check_writable,
    echo,
    error,
    exit_codes_help,
    fraction,
    no_key_message,
    positive_float,
    positive_int,
    split_names,
)
from langchain_ragmetrics._cli._ray import start_ray

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from langchain_ragmetrics._cache import VerdictCache
    from langchain_ragmetrics._dataset import LoadedDataset
    from langchain_ragmetrics._errors import JudgeSetupError
    from langchain_ragmetrics._schema import MetricResult
    from langchain_ragmetrics.evaluation import EvaluationResult

__all__ = ["EXIT_CODES", "register"]

EXIT_CODES: tuple[ExitCode, ...] = (
    ExitCode.ERROR,
    ExitCode.FILE_NOT_FOUND,
    ExitCode.UNKNOWN_METRIC,
    ExitCode.INVALID_DATASET,
    ExitCode.MISSING_COLUMNS,
    ExitCode.NO_API_KEY,
    ExitCode.PREFLIGHT_FAILED,
    ExitCode.QUALITY_GATE,
)
"""What this sub-command can return besides 0, 2 and 130 (its ``--help`` lists them)."""

_OUTPUT_SUFFIXES = (".jsonl", ".csv")


def _workers_arg(text: str) -> int | str:
    """``--workers``: ``auto`` or a whole number of at least 1."""
    return "auto" if text.strip().lower() == "auto" else positive_int(text)


def _ray_address(text: str) -> str:
    """``--ray-address``: the address, refused when blank.

    An unset shell variable gives a blank one; taken for no address, the run would go to a
    local Ray instead of the cluster meant.
    """
    if not text.strip():
        msg = (
            "expected the Ray cluster's address, got an empty one: give the head's host:port "
            "(e.g. head:6379) or auto, or use --ray for a local Ray"
        )
        raise argparse.ArgumentTypeError(msg)
    return text.strip()


def register(commands: Any) -> None:
    """Add the ``evaluate`` sub-command to ``commands`` (an argparse sub-parsers action)."""
    from langchain_ragmetrics.evaluation import metric_classes

    known = ", ".join(metric_classes())
    evaluate = commands.add_parser(
        "evaluate",
        help="score a dataset file and print the summary table",
        description="Score every row of a .jsonl / .json / .csv dataset (RAGAS column names "
        "accepted; CSV list cells hold JSON lists) with the chosen metrics.",
        epilog=exit_codes_help(EXIT_CODES),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    evaluate.add_argument("dataset", type=Path, help="dataset file (.jsonl, .json or .csv)")
    evaluate.add_argument(
        "--metrics",
        default=None,
        help="comma-separated metric names (default: every metric the dataset's columns allow; "
        f"LLM-judged ones only when a judge is configured); known: {known}",
    )
    add_judge_options(evaluate)
    evaluate.add_argument(
        "--concurrency",
        type=positive_int,
        default=16,
        help="judge calls at work at the same time (default: %(default)s)",
    )
    evaluate.add_argument(
        "--workers",
        type=_workers_arg,
        default=None,
        help="processes scoring the rows, this one included, sharing --concurrency: a number, "
        "or auto (the default: more than one only with several cores, 100+ jobs per process "
        "when forked or 400+ when spawned, and 8+ concurrent jobs per process, see "
        "docs/offline/scaling.md); with --ray, the number "
        "of Ray actors, each with --concurrency jobs (default: 2)",
    )
    evaluate.add_argument(
        "--ray",
        action="store_true",
        help="score on Ray Data actors (extra [ray]); a local Ray unless --ray-address is given",
    )
    evaluate.add_argument(
        "--ray-address",
        type=_ray_address,
        default=None,
        metavar="ADDR",
        help="address of the Ray cluster to run on (implies --ray): its head's host:port, "
        "e.g. head:6379, or auto (Ray Client ray:// addresses are not supported)",
    )
    evaluate.add_argument(
        "--ray-send-api-key",
        action="store_true",
        help="with --ray, send this process's OPENAI_API_KEY to the actors in the Ray job's "
        "runtime_env (readable by whoever can read the cluster's jobs, and written in plain "
        "text to Ray's log files on each node, logs/runtime_env_agent.log); by default the "
        "actors read their own OPENAI_API_KEY (a local Ray's actors have this process's)",
    )
    evaluate.add_argument(
        "--timeout", type=positive_float, default=None, help="seconds before a job is abandoned"
    )
    evaluate.add_argument(
        "--language", default=None, help="language of rows that do not set one, e.g. ja"
    )
    evaluate.add_argument(
        "--out", type=Path, default=None, help="write per-row results to a .jsonl or .csv file"
    )
    evaluate.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    subset = evaluate.add_mutually_exclusive_group()
    subset.add_argument(
        "--limit", type=positive_int, default=None, help="score only the first N rows"
    )
    subset.add_argument(
        "--sample",
        type=positive_int,
        default=None,
        help="score N rows drawn at random (reproducible with --seed)",
    )
    evaluate.add_argument(
        "--seed", type=int, default=0, help="random seed of --sample (default: %(default)s)"
    )
    gates = evaluate.add_argument_group("CI gates (exit code 9 when missed)")
    gates.add_argument(
        "--fail-under",
        default=None,
        metavar="METRIC=MIN,...",
        help="lowest acceptable MEAN score per metric over its scored rows (failed and skipped "
        "rows do not count), e.g. context_recall=0.7,context_precision=0.6",
    )
    gates.add_argument(
        "--max-failed-rate",
        type=fraction,
        default=None,
        metavar="RATE",
        help="highest acceptable share of failed jobs, e.g. 0.05 (a run where every job failed "
        "always exits 9)",
    )
    checks = evaluate.add_argument_group("pre-flight and cache")
    checks.add_argument(
        "--no-preflight",
        action="store_true",
        help="skip the one tiny test request sent to the judge before scoring",
    )
    checks.add_argument(
        "--cache",
        type=_cache_file,
        default=None,
        metavar="PATH",
        help="verdict cache file (default: ragmetrics/verdicts.sqlite3 under the user's cache "
        "directory); an unchanged re-run makes no judge call",
    )
    checks.add_argument(
        "--no-cache", action="store_true", help="neither read nor write the verdict cache"
    )
    _add_batch_options(evaluate)
    evaluate.set_defaults(handler=_evaluate_command)


def _cache_file(text: str) -> Path:
    """An argparse type: the ``--cache`` file, refused when blank or a switch word ("false")."""
    from langchain_ragmetrics._cache import reads_as_a_switch

    if reads_as_a_switch(text):
        hint = f", or write ./{text.strip()} for a file of that name" if text.strip() else ""
        msg = f"expected a file path, got {text!r}: use --no-cache to run without the cache{hint}"
        raise argparse.ArgumentTypeError(msg)
    return Path(text)


def _add_batch_options(parser: argparse.ArgumentParser) -> None:
    """The ``--batch-api`` group: half-price judge calls answered within 24 hours."""
    from langchain_ragmetrics.evaluation import BatchOptions

    fields = BatchOptions.model_fields
    batch = parser.add_argument_group(
        "OpenAI Batch API (half the price, answers within 24 hours; see docs/batch.md)"
    )
    batch.add_argument(
        "--batch-api",
        action="store_true",
        help="send the judge calls as one or more batches; run the same command again after "
        "Ctrl-C or a crash to pick the running batches up (nothing is uploaded twice)",
    )
    batch.add_argument(
        "--cancel",
        action="store_true",
        help="with --batch-api: cancel this command's running batches and score what they "
        "completed",
    )
    batch.add_argument(
        "--batch-dir",
        type=Path,
        default=None,
        metavar="PATH",
        help="where running batch jobs are remembered (default: ragmetrics/batches under the "
        "user's cache directory)",
    )
    batch.add_argument(
        "--poll-interval",
        type=positive_float,
        default=None,
        metavar="SECONDS",
        help=f"seconds between two status checks (default: {fields['poll_interval'].default:g})",
    )
    batch.add_argument(
        "--max-poll-failures",
        type=positive_int,
        default=None,
        metavar="N",
        help="failed status checks in a row that end the wait (the batches keep running; "
        f"the same command resumes) (default: {fields['max_poll_failures'].default})",
    )
    batch.add_argument(
        "--max-attempts",
        type=positive_int,
        default=None,
        metavar="N",
        help="times one request is sent, follow-up batches included "
        f"(default: {fields['max_attempts'].default})",
    )
    batch.add_argument(
        "--retry-direct",
        action="store_true",
        help="send the follow-ups as ordinary requests instead of a follow-up batch",
    )
    batch.add_argument(
        "--max-requests-per-file",
        type=positive_int,
        default=None,
        metavar="N",
        help="requests per batch file; more are split "
        f"(default: {fields['max_requests_per_file'].default})",
    )
    batch.add_argument(
        "--max-bytes-per-file",
        type=positive_int,
        default=None,
        metavar="BYTES",
        help="bytes per batch file; more are split "
        f"(default: {fields['max_bytes_per_file'].default})",
    )
    batch.add_argument(
        "--price-input",
        type=positive_float,
        default=None,
        metavar="PRICE",
        help="direct price of 1M input tokens (e.g. 0.15), for the cost estimate",
    )
    batch.add_argument(
        "--price-output",
        type=positive_float,
        default=None,
        metavar="PRICE",
        help="direct price of 1M output tokens (e.g. 0.60), for the cost estimate",
    )
    batch.add_argument(
        "--batch-discount",
        type=fraction,
        default=None,
        metavar="SHARE",
        help="batch price as a share of the direct price "
        f"(default: {fields['batch_discount'].default:g})",
    )


_BATCH_ONLY = {  # option -> BatchOptions field
    "--batch-dir": "state_dir",
    "--poll-interval": "poll_interval",
    "--max-poll-failures": "max_poll_failures",
    "--max-attempts": "max_attempts",
    "--retry-direct": "retry_direct",
    "--cancel": "cancel",
    "--max-requests-per-file": "max_requests_per_file",
    "--max-bytes-per-file": "max_bytes_per_file",
    "--price-input": "input_price",
    "--price-output": "output_price",
    "--batch-discount": "batch_discount",
}
"""The options that only a ``--batch-api`` run reads."""


def _batch_options(args: argparse.Namespace, reports: list[Any]) -> Any:
    """The BatchOptions of the command line (False without --batch-api).

    Raises:
        ValueError: A Batch API option is given without ``--batch-api`` (the run would go
            direct, at twice the price), or a value the options refuse (the message names
            the option).
    """
    from pydantic import ValidationError

    from langchain_ragmetrics.evaluation import BatchOptions

    given = {flag: getattr(args, flag[2:].replace("-", "_")) for flag in _BATCH_ONLY}
    given = {k: v for k, v in given.items() if v is not None and v is not False}  # 0 is given
    if not args.batch_api:
        if given:
            verb = "applies" if len(given) == 1 else "apply"
            msg = f"{', '.join(given)} only {verb} to a Batch API run: add --batch-api"
            raise ValueError(msg)
        return False
    try:
        return BatchOptions(
            **{_BATCH_ONLY[flag]: value for flag, value in given.items()},
            on_report=reports.append,
        )
    except ValidationError as exc:
        flags = {field: flag for flag, field in _BATCH_ONLY.items()}
        first = exc.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        msg = f"{flags.get(field, field)}: {first['msg']}, got {first.get('input')!r}"
        raise ValueError(msg) from None


def _subset(
    data: LoadedDataset, *, limit: int | None, sample: int | None, seed: int
) -> LoadedDataset:
    """The first ``limit`` rows, or ``sample`` rows drawn with ``seed`` (in dataset order)."""
    from dataclasses import replace

    count = len(data.samples)
    if limit is not None:
        keep = list(range(min(limit, count)))
    elif sample is not None:
        keep = sorted(
            random.Random(seed).sample(  # noqa: S311 - sampling rows, not crypto
                range(count), min(sample, count)
            )
        )
    else:
        return data
    return replace(data, samples=[data.samples[i] for i in keep], refs=[data.refs[i] for i in keep])


def _default_metrics(data: LoadedDataset, *, judge_available: bool) -> tuple[list[Any], str]:
    """The metrics whose fields some row has, and a line telling the user what was picked."""
    from langchain_ragmetrics.evaluation import is_judged, metric_classes, metric_from_name

    picked, left_out = [], []
    for name in metric_classes():
        metric = metric_from_name(name)
        usable = False
        for row in data.samples:
            try:
                metric.validate_sample(row)
            except ValueError:
                continue
            usable = True
            break
        if not usable:
            continue
        if is_judged(metric) and not judge_available:
            left_out.append(name)
        else:
            picked.append(metric)
    note = "No --metrics given; scoring what the dataset's columns allow: " + (
        ", ".join(m.metric_name for m in picked) or "nothing"
    )
    if left_out:
        note += f" (not {', '.join(left_out)}: no judge configured, see OPENAI_API_KEY)"
    return picked, note


def _evaluate_command(args: argparse.Namespace) -> int:  # noqa: PLR0915 - one linear flow
    from langchain_ragmetrics._cache import VerdictCache
    from langchain_ragmetrics._dataset import read_dataset
    from langchain_ragmetrics._errors import BatchError, CacheError
    from langchain_ragmetrics._text import check_language
    from langchain_ragmetrics.evaluation import (
        DatasetError,
        JudgeSetupError,
        MissingFieldError,
        PreflightError,
        UnknownMetricError,
        evaluate,
        is_judged,
        metric_from_name,
    )
    from langchain_ragmetrics.evaluation._gates import parse_thresholds

    out: Path | None = args.out
    on_ray = args.ray or args.ray_address is not None
    if args.ray_send_api_key and not on_ray:
        error("--ray-send-api-key only applies to a Ray run: add --ray or --ray-address")
        return ExitCode.USAGE
    if args.batch_api and on_ray:
        error("--batch-api and --ray are two ways to run the jobs: pick one")
        return ExitCode.USAGE
    if args.batch_api and args.workers not in (None, 1, "auto"):
        error(
            "--workers spreads direct judge calls over processes; with --batch-api the "
            "Batch API does the work: leave --workers out"
        )
        return ExitCode.USAGE
    reports: list[Any] = []
    try:
        batch = _batch_options(args, reports)
    except ValueError as exc:
        error(str(exc))
        return ExitCode.USAGE
    if out is not None and out.suffix.lower() not in _OUTPUT_SUFFIXES:
        error(f"--out must end in {' or '.join(_OUTPUT_SUFFIXES)}, got {str(out)!r}")
        return ExitCode.USAGE
    thresholds: dict[str, float] = {}
    if args.fail_under is not None:
        try:
            thresholds = parse_thresholds(args.fail_under)
        except ValueError as exc:
            error(f"--fail-under: {exc}")
            return ExitCode.USAGE
    metrics = None
    if args.metrics is not None:
        names = split_names(args.metrics)
        if not names:
            error("--metrics is empty")
            return ExitCode.USAGE
        try:
            metrics = [metric_from_name(name) for name in names]
        except UnknownMetricError as exc:
            error(str(exc))
            return ExitCode.UNKNOWN_METRIC
    try:
        language = check_language(args.language, field="--language") if args.language else None
    except ValueError as exc:
        error(str(exc))
        return ExitCode.USAGE
    if out is not None and (problem := check_writable(out, option="--out")) is not None:
        error(problem)
        return ExitCode.PREFLIGHT_FAILED
    try:
        data = read_dataset(args.dataset)
    except FileNotFoundError:
        error(f"dataset file not found: {args.dataset}")
        return ExitCode.FILE_NOT_FOUND
    except DatasetError as exc:
        error(str(exc))
        return ExitCode.INVALID_DATASET
    data = _subset(data, limit=args.limit, sample=args.sample, seed=args.seed)

    if metrics is None:
        available = build_judge(args.model, args.base_url) is not None
        metrics, note = _default_metrics(data, judge_available=available)
        echo(note)
        if not metrics:
            error(f"{data.source}: no metric can score these columns; pass --metrics")
            return ExitCode.MISSING_COLUMNS
    columns = [m.metric_name for m in metrics]
    unknown = [name for name in thresholds if name not in columns]
    if unknown:
        error(
            f"--fail-under names {', '.join(unknown)}, not among the metrics: {', '.join(columns)}"
        )
        return ExitCode.USAGE

    judged = [m.metric_name for m in metrics if is_judged(m)]
    llm = build_judge(args.model, args.base_url) if judged else None
    cache = None
    if judged and not args.no_cache:
        try:
            cache = VerdictCache(args.cache)
        except CacheError as exc:
            error(f"{exc} (use --no-cache to run without it)")
            return ExitCode.PREFLIGHT_FAILED
    if on_ray:
        return _evaluate_on_ray(
            args,
            data,
            metrics,
            llm=llm,
            language=language,
            thresholds=thresholds,
            cache=cache,
        )
    try:
        result = evaluate(
            data,
            metrics,
            llm=llm,
            language=language,
            max_concurrency=args.concurrency,
            workers=args.workers or "auto",
            timeout=args.timeout,
            show_progress=not args.no_progress,
            cache=cache,
            preflight=not args.no_preflight,
            batch_api=batch,
        )
    except MissingFieldError as exc:
        error(str(exc))
        return ExitCode.MISSING_COLUMNS
    except JudgeSetupError:
        error(no_key_message(judged))
        return ExitCode.NO_API_KEY
    except PreflightError as exc:
        error(f"pre-flight check failed, nothing was scored: {exc}")
        return ExitCode.PREFLIGHT_FAILED
    except BatchError as exc:
        error(str(exc))
        return ExitCode.ERROR
    finally:
        if cache is not None:
            cache.close()

    return _report(result, args, thresholds, reports)


def _report(
    result: EvaluationResult,
    args: argparse.Namespace,
    thresholds: dict[str, float],
    reports: Sequence[Any] = (),
) -> int:
    """Print the summary, write --out, and turn the run into an exit code."""
    from langchain_ragmetrics.evaluation._gates import gate_problems

    out: Path | None = args.out
    echo(result.summary())
    for report in reports:
        echo(report.summary())
    if out is not None:
        try:
            written = result.to_csv(out) if out.suffix.lower() == ".csv" else result.to_jsonl(out)
        except OSError as exc:
            error(f"cannot write {out}: {exc.strerror or exc}")
            return ExitCode.ERROR
        echo(f"Results written to {written}")
    if result.interrupted:
        return ExitCode.INTERRUPTED
    problems = gate_problems(result, fail_under=thresholds, max_failed_rate=args.max_failed_rate)
    for problem in problems:
        error(f"quality gate: {problem}")
    return ExitCode.QUALITY_GATE if problems else ExitCode.OK


def _evaluate_on_ray(
    args: argparse.Namespace,
    data: LoadedDataset,
    metrics: list[Any],
    *,
    llm: BaseChatModel | None,
    language: str | None,
    thresholds: dict[str, float],
    cache: VerdictCache | None,
) -> int:
    """``--ray``: score the rows on Ray Data actors, then report like a local run.

    The checks a local run makes before any paid call are made here first, in this process:
    a judge is configured, the metrics' fields are in the data, and (unless
    ``--no-preflight``) the judge answers one structured request. The actors then build their
    own judge from the same model, endpoint and key.
    """
    import os

    from langchain_ragmetrics.evaluation import MissingFieldError, PreflightError, is_judged
    from langchain_ragmetrics.evaluation._preflight import preflight_metrics
    from langchain_ragmetrics.evaluation._run import check_fields, prepare_metrics

    try:
        judged = [m.metric_name for m in metrics if is_judged(m)]
        if judged and llm is None:
            error(no_key_message(judged))
            return ExitCode.NO_API_KEY
        checked = prepare_metrics(metrics, llm=llm, language=language, cache=cache)
        try:
            check_fields(data, [m.metric_name for m in checked], checked)
            preflight_metrics(checked, call=not args.no_preflight, samples=data.samples)
        except MissingFieldError as exc:
            error(str(exc))
            return ExitCode.MISSING_COLUMNS
        except PreflightError as exc:
            error(f"pre-flight check failed, nothing was scored: {exc}")
            return ExitCode.PREFLIGHT_FAILED
    finally:
        if cache is not None:
            cache.close()  # the actors open the file themselves
    try:
        import ray

        from langchain_ragmetrics.integrations.ray import result_from_rows
    except ImportError:
        error("--ray needs Ray Data: pip install 'langchain-ragmetrics[ray]'")
        return ExitCode.ERROR
    try:
        start_ray(ray, args.ray_address)
    except Exception as exc:  # Ray raises many kinds; each is reported alike
        env = os.environ.get("RAY_ADDRESS")
        where = (
            f"the Ray cluster at {args.ray_address}"
            if args.ray_address
            else f"the Ray cluster at {env} (RAY_ADDRESS)"
            if env and env not in ("auto", "local")
            else "a local Ray"
        )
        error(f"cannot start or reach {where}, nothing was scored: {type(exc).__name__}: {exc}")
        return ExitCode.PREFLIGHT_FAILED
    from time import perf_counter  # the run's wall time, for the result's elapsed_s

    started = perf_counter()
    outcome = _score_on_ray(ray, args, data, metrics, language=language, cache=cache)
    if isinstance(outcome, int):
        return outcome
    scored, interrupted = outcome
    names = [m.metric_name for m in metrics]
    locations = {i + 1: data.describe(i) for i in range(len(data.samples))}
    if interrupted:
        scored = [*scored, *_not_run_rows(data, names, scored)]
    result = result_from_rows(
        scored,
        checked,  # prepared as a local run's: the result's info names the same judge and prompts
        source=data.source,
        interrupted=interrupted,
        locations=locations,
        elapsed_s=perf_counter() - started,
    )
    return _report(result, args, thresholds)


def _not_run_rows(
    data: LoadedDataset, metrics: list[str], scored: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The rows Ctrl-C left unscored, each with every metric not run, as the actors write rows.

    A local run keeps such a row (its results None, "not run"), so the summary counts the
    jobs that did not run and ``--out`` has every row; these make an interrupted ``--ray``
    run say and write the same.
    """
    from langchain_ragmetrics.integrations.ray import (
        RECORD_COLUMN,
        ROW_COLUMN,
        _record_of,
        _record_text,
    )

    done = {row.get(ROW_COLUMN) for row in scored}
    not_run: dict[str, MetricResult | None] = dict.fromkeys(metrics)
    rows = []
    for number, sample in enumerate(data.samples, start=1):
        if number not in done:
            record = _record_of(metrics, {ROW_COLUMN: number}, sample, not_run)
            rows.append({RECORD_COLUMN: _record_text(record), ROW_COLUMN: number})
    return rows


def _actor_setup_failed(exc: JudgeSetupError, *, key_sent: bool) -> str:
    """What to say when the judge cannot be built for the actors, in the command's terms.

    The cause in one line (not Ray's traceback, nor advice in ``evaluate_ray``'s terms), then
    what to do.
    """
    from langchain_ragmetrics._cli._ray import actor_error, first_line

    message = first_line(actor_error(exc))
    if not key_sent:
        message += (
            "\n  The Ray actors read OPENAI_API_KEY from their own environment: set it on the "
            "cluster's nodes, or add --ray-send-api-key to send this process's key with the job"
        )
    return message


def _score_on_ray(
    ray: Any,
    args: argparse.Namespace,
    data: LoadedDataset,
    metrics: list[Any],
    *,
    language: str | None,
    cache: VerdictCache | None,
) -> tuple[list[dict[str, Any]], bool] | int:
    """The result rows of ``--ray`` and whether Ctrl-C stopped it, or the exit code of a failure.

    Rows are kept as they arrive, so Ctrl-C keeps what was scored (as a local run does); Ray
    is shut down either way, a second Ctrl-C waiting for it. An error Ray raises is named in
    one line, not a traceback; an actor's, by the actor's error.
    """
    import json
    import os
    import re
    import sys
    import threading
    import warnings

    from langchain_ragmetrics._cli._ray import (
        actor_error,
        first_line,
        pool_warning,
        quiet_setup_errors,
        stop_ray,
    )
    from langchain_ragmetrics.evaluation import JudgeSetupError
    from langchain_ragmetrics.integrations.ray import evaluate_ray

    # Each row as the local run read it; metadata as JSON text, never an Arrow struct (a key
    # holding a number in one row and text in another is fine). `row` is the row's place in
    # `data`: it orders the results and gives back the row's file, row and line.
    rows = [
        {
            **sample.model_dump(exclude_none=True, exclude={"metadata"}),
            **({"metadata": json.dumps(sample.metadata, default=str)} if sample.metadata else {}),
            "row": i + 1,
        }
        for i, sample in enumerate(data.samples)
    ]
    scored: list[dict[str, Any]] = []
    threads_before = set(threading.enumerate())
    batches = None
    num_actors = args.workers if isinstance(args.workers, int) else 2
    try:
        try:
            unfit = pool_warning(ray, num_actors)
            if unfit is not None:
                echo(f"ragmetrics: warning: {unfit[1]}", sys.stderr)
            with warnings.catch_warnings():
                if unfit is not None:  # said above, in the command's terms
                    warnings.filterwarnings("ignore", re.escape(unfit[0]), RuntimeWarning)
                dataset = evaluate_ray(
                    ray.data.from_items(rows),
                    metrics,
                    model=args.model,
                    base_url=args.base_url or os.environ.get("OPENAI_BASE_URL"),
                    send_api_key=args.ray_send_api_key,
                    language=language,
                    num_actors=num_actors,
                    max_concurrency=args.concurrency,
                    # small enough that results come back (and survive Ctrl-C) as the run
                    # goes, large enough that an actor's --concurrency slots stay busy
                    batch_size=4 * args.concurrency,
                    timeout=args.timeout,
                    # the Path, not its text: "./0" prints as "0", which evaluate_ray refuses
                    cache=None if cache is None else cache.path,
                )
            batches = iter(dataset.iter_batches(batch_size=None, batch_format="pyarrow"))
            with quiet_setup_errors():
                for block in batches:
                    scored.extend(block.to_pylist())  # kept as they arrive: Ctrl-C keeps them
                    if not args.no_progress:
                        echo(f"Ray: {len(scored)} of {len(rows)} rows scored", sys.stderr)
        finally:
            stop_ray(ray, batches, threads_before)  # a Ctrl-C meanwhile is raised after it
    except KeyboardInterrupt:  # the first Ctrl-C, or one while Ray was stopped
        return scored, True
    except JudgeSetupError as exc:  # Ray's error of an actor's JudgeSetupError is one too
        error(_actor_setup_failed(exc, key_sent=args.ray_send_api_key))
        return ExitCode.NO_API_KEY
    except Exception as exc:  # Ray wraps an actor's error in its own kinds: named, one line
        cause = actor_error(exc)
        error(f"the Ray run failed: {type(cause).__name__}: {first_line(cause)}")
        return ExitCode.ERROR
    return scored, False
