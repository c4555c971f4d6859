"""Load evaluation data: RagSamples, dicts, JSONL / JSON / CSV files or pandas DataFrames.

Every row is checked before anything is scored. Rows that cannot become a :class:`RagSample`
are all collected and reported together in one :class:`DatasetError` (file, row number and
field of each), so one bad row never hides the others and no judge call is spent on a dataset
that is known to be broken. RAGAS column names are accepted, and unknown columns are kept in
``RagSample.metadata`` so nothing is lost.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from langchain_ragmetrics._errors import DatasetError, MissingFieldError, RowProblem, RowRef
from langchain_ragmetrics._plain import unwrap_numpy
from langchain_ragmetrics._schema import _ALIASES, RagSample

__all__ = [
    "RUN_HEADER_KEY",
    "DatasetError",
    "DatasetLike",
    "LoadedDataset",
    "MissingFieldError",
    "RowProblem",
    "RowRef",
    "json_lines",
    "load_dataset",
    "read_dataset",
]

SUPPORTED_SUFFIXES = (".jsonl", ".ndjson", ".json", ".csv")
"""File extensions :func:`load_dataset` reads."""

_LIST_FIELDS = frozenset({"contexts", "context_ids", "reference_contexts", "reference_context_ids"})
_LIST_COLUMNS = frozenset(
    _LIST_FIELDS | {alias for alias, field in _ALIASES.items() if field in _LIST_FIELDS}
) | {"ground_truths"}

RUN_HEADER_KEY = "ragmetrics_run"
"""Key of the header line of a results file (``EvaluationResult.to_jsonl``); the loader skips
that line, so a results file is a valid dataset again."""


@dataclass(frozen=True)
class LoadedDataset:
    """Validated samples together with where each one came from."""

    samples: list[RagSample]
    """The rows, in source order."""
    refs: list[RowRef]
    """The origin of each sample (same length as ``samples``)."""
    source: str
    """File name, or ``"dataset"`` / ``"DataFrame"``."""

    def describe(self, position: int) -> str:
        """Human-readable location of the sample at ``position``."""
        return self.refs[position].describe(self.source)


DatasetLike = str | os.PathLike[str] | Iterable[Any] | Mapping[str, Sequence[Any]] | LoadedDataset
"""What ``evaluate`` accepts: a path, RagSamples or dicts, a dict of columns or a DataFrame."""


def load_dataset(source: DatasetLike) -> list[RagSample]:
    """Load and validate a dataset into RagSamples.

    Args:
        source: A list of RagSamples or dicts (RAGAS column names accepted), a dict of
            columns, a path to a ``.jsonl`` / ``.json`` / ``.csv`` file (list columns such as
            ``contexts`` hold a JSON list in CSV cells), or a pandas DataFrame.

    Raises:
        FileNotFoundError: The path does not exist.
        DatasetError: The source cannot be read, or rows are invalid (all of them listed).
    """
    return read_dataset(source).samples


def read_dataset(source: DatasetLike) -> LoadedDataset:
    """Like :func:`load_dataset`, keeping the origin of each row for later messages."""
    if isinstance(source, LoadedDataset):
        return source
    if isinstance(source, (str, os.PathLike)):
        return _read_file(Path(source))
    if _is_dataframe(source):
        return _validate("DataFrame", _dataframe_records(source))
    if isinstance(source, Mapping):
        return _validate("dataset", _enumerate_records(_columns_to_records(source, "dataset")))
    if isinstance(source, (bytes, bytearray)):
        msg = "a dataset must be a path, a list of samples, a dict of columns or a DataFrame"
        raise DatasetError(msg)
    if isinstance(source, Iterable):
        return _validate("dataset", _enumerate_records(source))
    msg = (
        f"cannot read a dataset from {type(source).__name__}: pass a path, a list of "
        "RagSamples or dicts, a dict of columns or a pandas DataFrame"
    )
    raise DatasetError(msg)


# --------------------------------------------------------------------------- files


def _read_file(path: Path) -> LoadedDataset:
    if not path.exists():
        msg = f"dataset file not found: {path}"
        raise FileNotFoundError(2, msg, str(path))
    if path.is_dir():
        msg = f"{path} is a directory, not a dataset file"
        raise DatasetError(msg)
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        msg = f"{path}: unsupported file type {suffix or '(none)'!r}; use one of " + ", ".join(
            SUPPORTED_SUFFIXES
        )
        raise DatasetError(msg)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        msg = f"{path}: not valid UTF-8 text ({exc.reason} at byte {exc.start})"
        raise DatasetError(msg) from exc
    except OSError as exc:
        msg = f"{path}: cannot read the file: {exc.strerror or exc}"
        raise DatasetError(msg) from exc
    name = str(path)
    if suffix in (".jsonl", ".ndjson"):
        return _validate(name, _jsonl_records(text, name))
    if suffix == ".json":
        return _validate(name, _json_records(text, name))
    return _validate(name, _csv_records(text, name))


_Record = tuple[RowRef, Any, list[RowProblem]]
"""A raw record with its origin and any problems found while reading it."""


def json_lines(text: str) -> list[str]:
    """The lines of a JSONL text: split at newlines only.

    ``str.splitlines`` also splits at U+2028, U+2029, U+0085 and a few control characters,
    which JSON writers leave raw inside strings (``ensure_ascii=False``): a row holding one
    would be cut in two.
    """
    return text.split("\n")


def _jsonl_records(text: str, name: str) -> Iterator[_Record]:
    row = 0
    for line_no, line in enumerate(json_lines(text), start=1):
        if not line.strip():
            continue
        row += 1
        ref = RowRef(row, line=line_no)
        try:
            value = json.loads(line)
        except ValueError as exc:
            yield ref, None, [RowProblem(name, ref, None, f"invalid JSON: {exc}")]
            continue
        if row == 1 and isinstance(value, dict) and list(value) == [RUN_HEADER_KEY]:
            row = 0  # the header line of a results file, not a sample
            continue
        yield ref, value, []


def _json_records(text: str, name: str) -> Iterator[_Record]:
    try:
        data = json.loads(text)
    except ValueError as exc:
        msg = f"{name}: invalid JSON: {exc}"
        raise DatasetError(msg) from exc
    if isinstance(data, Mapping):
        for key in ("samples", "data", "rows", "examples"):
            if isinstance(data.get(key), list):
                data = data[key]
                break
        else:
            data = _columns_to_records(data, name)
    if not isinstance(data, list):
        msg = f"{name}: expected a JSON array of objects or an object of columns"
        raise DatasetError(msg)
    for i, value in enumerate(data):
        yield RowRef(i + 1), value, []


def _csv_records(text: str, name: str) -> Iterator[_Record]:
    # The csv module splits rows itself (at \n, \r\n, \r): str.splitlines would also cut
    # a row at an unquoted U+2028 or form feed, shifting its cells into a row of their own.
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if not reader.fieldnames:
        return
    seen: set[str] = set()
    for column in reader.fieldnames:
        if column and column in seen:
            msg = f"{name}: the column {column!r} appears twice in the header (line 1)"
            raise DatasetError(msg)
        seen.add(column)
    start = 2  # the header is line 1
    for row, raw in enumerate(reader, start=1):
        ref = RowRef(row, line=start)
        start = reader.line_num + 1
        extra = raw.pop(None, None)
        record, problems = _cells_to_record(name, ref, ((c, v) for c, v in raw.items() if c))
        if extra:
            problems.insert(0, RowProblem(name, ref, None, f"{len(extra)} more cells than columns"))
        yield ref, record, problems


# --------------------------------------------------------------------------- in memory


def _is_dataframe(value: Any) -> bool:
    cls = type(value)
    return cls.__name__ == "DataFrame" and cls.__module__.startswith("pandas")


def _dataframe_records(frame: Any) -> Iterator[_Record]:
    columns = [str(c) for c in frame.columns]
    for row, (label, values) in enumerate(
        zip(frame.index, frame.itertuples(index=False, name=None), strict=True), start=1
    ):
        ref = RowRef(row, index=unwrap_numpy(label))
        record, problems = _cells_to_record("DataFrame", ref, zip(columns, values, strict=True))
        yield ref, record, problems


def _columns_to_records(columns: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """Turn ``{"question": [...], "contexts": [[...], ...]}`` into a list of records."""
    lengths = {
        key: len(value)
        for key, value in columns.items()
        if isinstance(value, Sequence) and not isinstance(value, str)
    }
    if len(lengths) != len(columns) or len(set(lengths.values())) > 1:
        detail = ", ".join(f"{k}: {n}" for k, n in lengths.items()) or "no list columns"
        msg = (
            f"{name}: a mapping must hold columns of equal length "
            f"(column name -> list of values); got {detail}"
        )
        raise DatasetError(msg)
    size = next(iter(lengths.values()), 0)
    return [{key: columns[key][i] for key in columns} for i in range(size)]


def _enumerate_records(items: Iterable[Any]) -> Iterator[_Record]:
    for i, value in enumerate(items):
        yield RowRef(i + 1, index=i), value, []


# --------------------------------------------------------------------------- cells


def _is_missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def _cell(column: str, value: Any) -> Any:
    """Normalise one CSV or DataFrame cell; None means "absent"."""
    value = unwrap_numpy(value)
    if _is_missing(value):
        return None
    if isinstance(value, str):
        if column in _LIST_COLUMNS:
            return _list_cell(value)
        if column == "metadata":
            return _metadata_cell(value)
        if not value.strip() and (column in RagSample.model_fields or column in _ALIASES):
            return None
    return value


def _cells_to_record(
    source: str, ref: RowRef, cells: Iterable[tuple[str, Any]]
) -> tuple[dict[str, Any], list[RowProblem]]:
    """Normalise the (column, cell) pairs of a CSV or DataFrame row; absent cells are left out."""
    record: dict[str, Any] = {}
    problems: list[RowProblem] = []
    for column, cell in cells:
        try:
            value = _cell(column, cell)
        except ValueError as exc:
            problems.append(RowProblem(source, ref, column, str(exc)))
            continue
        if value is not None:
            record[column] = value
    return record, problems


def _list_cell(text: str) -> list[Any] | None:
    stripped = text.strip()
    if not stripped:
        return None
    if not stripped.startswith("["):
        return [text]
    try:
        value = json.loads(stripped)
    except ValueError as json_error:
        try:
            value = ast.literal_eval(stripped)
        except (ValueError, SyntaxError):
            msg = f'must be a JSON list such as ["first", "second"] ({json_error})'
            raise ValueError(msg) from None
    if not isinstance(value, list):
        msg = f"must be a JSON list, got {type(value).__name__}"
        raise ValueError(msg)
    return value


def _metadata_cell(text: str) -> dict[str, Any] | None:
    if not text.strip():
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        msg = f"must be a JSON object ({exc})"
        raise ValueError(msg) from None
    if not isinstance(value, dict):
        msg = f"must be a JSON object, got {type(value).__name__}"
        raise ValueError(msg)
    return value


# --------------------------------------------------------------------------- validation


def _column_for(field: str, record: Mapping[str, Any]) -> str:
    """The user's own name for one of our fields (``retrieved_contexts`` for ``contexts``)."""
    if field in record:
        return field
    for key in record:
        if _ALIASES.get(key) == field:
            return str(key)
    return field


def _clean(message: str) -> str:
    for prefix in ("Value error, ", "Assertion failed, "):
        if message.startswith(prefix):
            return message[len(prefix) :]
    return message


def _to_sample(value: Any, source: str, ref: RowRef) -> tuple[RagSample | None, list[RowProblem]]:
    if isinstance(value, RagSample):
        return value, []
    if isinstance(value, BaseModel):
        value = value.model_dump()
    if not isinstance(value, Mapping):
        kind = type(value).__name__
        return None, [RowProblem(source, ref, None, f"expected an object (a dict), got {kind}")]
    try:
        return RagSample.model_validate(dict(value)), []
    except ValidationError as exc:
        problems = []
        for error in exc.errors():
            loc = [str(part) for part in error.get("loc", ())]
            field = _column_for(loc[0], value) if loc else None
            if field is not None and len(loc) > 1:
                field += "".join(f"[{part}]" for part in loc[1:])
            problems.append(RowProblem(source, ref, field, _clean(str(error.get("msg", "")))))
        return None, problems


def _validate(source: str, records: Iterable[_Record]) -> LoadedDataset:
    samples: list[RagSample] = []
    refs: list[RowRef] = []
    problems: list[RowProblem] = []
    for ref, value, found in records:
        if found:
            problems.extend(found)
            continue
        sample, errors = _to_sample(value, source, ref)
        if sample is None:
            problems.extend(errors)
            continue
        samples.append(sample)
        refs.append(ref)
    if problems:
        rows = len({p.ref.row for p in problems})
        noun = "row is" if rows == 1 else "rows are"
        raise DatasetError(f"{source}: {rows} {noun} invalid", problems)
    if not samples:
        raise DatasetError(f"{source}: the dataset has no rows")
    return LoadedDataset(samples, refs, source)
