import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from langchain_core.documents import Document
from pydantic import BaseModel

from langchain_ragmetrics import RagSample
from langchain_ragmetrics._dataset import DatasetError, load_dataset, read_dataset

DATA = Path(__file__).parent / "data"


def test_list_of_dicts_with_ragas_names_keeps_unknown_columns() -> None:
    samples = load_dataset(
        [
            {"question": "q1", "contexts": ["c1"], "ground_truth": "r1", "topic": "physics"},
            {
                "user_input": "q2",
                "retrieved_contexts": ["c2", "c3"],
                "response": "a2",
                "reference": "r2",
                "reference_contexts": ["c2"],
            },
            RagSample(question="q3", contexts=["c4"]),
        ]
    )
    assert [s.question for s in samples] == ["q1", "q2", "q3"]
    assert samples[0].reference == "r1"
    assert samples[0].metadata == {"topic": "physics"}
    assert samples[1].contexts == ["c2", "c3"]
    assert samples[1].answer == "a2"
    assert samples[1].reference_contexts == ["c2"]


def test_documents_and_other_pydantic_models() -> None:
    class External(BaseModel):
        user_input: str
        retrieved_contexts: list[str]

    samples = load_dataset(
        [
            {"question": "q", "contexts": [Document(page_content="text", id="doc-1")]},
            External(user_input="q2", retrieved_contexts=["x"]),
        ]
    )
    assert samples[0].context_ids == ["doc-1"]
    assert samples[1].question == "q2"
    assert samples[1].contexts == ["x"]


def test_dict_of_columns_like_a_ragas_dataset() -> None:
    # The shape of the entity-recall seed example (``Dataset.from_dict(data_samples)``).
    samples = load_dataset(
        {
            "contexts": [
                ["The First AFL-NFL World Championship Game was played on January 15, 1967."],
                ["The Green Bay Packers...Green Bay, Wisconsin.", "The Packers compete..."],
            ],
            "ground_truth": [
                "The first superbowl was held on January 15, 1967",
                "The New England Patriots have won the Super Bowl a record six times",
            ],
        }
    )
    assert len(samples) == 2
    assert samples[1].contexts[1] == "The Packers compete..."
    assert samples[0].reference == "The first superbowl was held on January 15, 1967"


def test_dict_of_columns_of_unequal_length_is_rejected() -> None:
    with pytest.raises(DatasetError, match=r"columns of equal length.*question: 2, contexts: 1"):
        load_dataset({"question": ["a", "b"], "contexts": [["x"]]})


def test_jsonl_reports_every_bad_row_with_file_row_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    lines = [
        json.dumps({"question": "ok", "contexts": ["c"]}),
        "",
        "{not json",
        json.dumps({"question": "bad", "retrieved_contexts": 42}),
        json.dumps(["a", "list"]),
        json.dumps({"question": "bad language", "contexts": [], "language": "xx"}),
        json.dumps({"question": "fine too", "contexts": ["d"]}),
        json.dumps({"question": "bad metadata", "contexts": ["e"], "metadata": [1, 2]}),
    ]
    path.write_text("\n".join(lines), encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    problems = [str(p) for p in info.value.problems]
    assert problems[0].startswith(f"{path}, row 2 (line 3): invalid JSON")
    assert problems[1] == (
        f"{path}, row 3 (line 4), field `retrieved_contexts`: "
        "`contexts` must be a list of strings or Documents, got int"
    )
    assert problems[2] == f"{path}, row 4 (line 5): expected an object (a dict), got list"
    assert problems[3].startswith(f"{path}, row 5 (line 6), field `language`: ")
    assert "unsupported language 'xx'" in problems[3]
    assert problems[4].startswith(f"{path}, row 7 (line 8), field `metadata`: ")
    assert "valid dictionary" in problems[4]
    message = str(info.value)
    assert message.startswith(f"{path}: 5 rows are invalid")
    assert all(p in message for p in problems)


def test_a_row_giving_one_field_twice_is_reported_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "twice.jsonl"
    rows = [{"question": "ok", "contexts": ["c"]}, {"question": "a", "user_input": "b"}]
    path.write_text("\n".join(json.dumps(row) for row in rows), encoding="utf-8")
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    (problem,) = [str(p) for p in info.value.problems]
    assert problem == (
        f"{path}, row 2 (line 2): `question` and `user_input` are two names of the field "
        "`question` and their values differ: give one of them"
    )


def test_jsonl_with_bom_and_japanese(tmp_path: Path) -> None:
    path = tmp_path / "ja.jsonl"
    row = {"question": "田中部長の部署はどこですか?", "contexts": ["営業部"], "language": "ja"}
    path.write_text(json.dumps(row, ensure_ascii=False) + "\n", encoding="utf-8-sig")
    (sample,) = load_dataset(path)
    assert sample.question == "田中部長の部署はどこですか?"
    assert sample.language == "ja"


def test_json_array_wrapped_array_and_columns(tmp_path: Path) -> None:
    rows = [{"question": "q1", "contexts": ["a"]}, {"question": "q2", "contexts": ["b"]}]
    plain, wrapped, columns = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    plain.write_text(json.dumps(rows))
    wrapped.write_text(json.dumps({"samples": rows}))
    columns.write_text(json.dumps({"question": ["q1", "q2"], "contexts": [["a"], ["b"]]}))
    for path in (plain, wrapped, columns):
        assert [s.question for s in load_dataset(path)] == ["q1", "q2"]


def test_json_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text("[{")
    with pytest.raises(DatasetError, match=r"broken\.json: invalid JSON"):
        load_dataset(path)
    path.write_text('"just a string"')
    with pytest.raises(DatasetError, match=r"broken\.json: expected a JSON array"):
        load_dataset(path)
    path.write_text(json.dumps([{"question": "q", "contexts": "fine"}, {"contexts": {"x": 1}}]))
    with pytest.raises(DatasetError, match=r"broken\.json, row 2, field `contexts`"):
        load_dataset(path)


def test_csv_cells_json_lists_python_lists_and_metadata() -> None:
    loaded = read_dataset(DATA / "ragas_v1.csv")
    samples = loaded.samples
    assert [s.question for s in samples] == [
        "Who developed the theory of relativity?",
        "When was the Taj Mahal commissioned?",
        "What is the capital of France?",
    ]
    assert samples[0].contexts == ["Einstein developed relativity.", 'He said "hello", twice.']
    # A list written by pandas ``to_csv`` (Python literal with single quotes).
    assert samples[1].contexts == ["It was commissioned in 1631.", "Shah Jahan's wife"]
    # A bare string is one context; an empty cell is absent.
    assert samples[2].contexts == ["Paris is the capital of France."]
    assert samples[2].answer is None
    assert samples[0].reference_context_ids == ["einstein", "relativity"]
    assert samples[0].metadata == {"source": "wiki", "topic": "physics"}
    assert samples[1].metadata == {"topic": "history"}
    # A quoted cell spanning two lines moves the next row's line number.
    assert [r.line for r in loaded.refs] == [2, 3, 5]


def test_csv_bad_cells_are_all_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(
        "question,contexts,metadata\n"
        'q1,"[""unterminated",\n'
        'q2,"[""fine""]","{not json"\n'
        'q3,"[""x"", {""a"": 1}]",\n'
        'q4,"[""ok""]",,extra\n'
    )
    with pytest.raises(DatasetError) as info:
        load_dataset(path)
    problems = [str(p) for p in info.value.problems]
    assert problems[0].startswith(f"{path}, row 1 (line 2), field `contexts`: must be a JSON list")
    assert problems[1].startswith(f"{path}, row 2 (line 3), field `metadata`: must be a JSON")
    assert problems[2] == (
        f"{path}, row 3 (line 4), field `contexts`: "
        "`contexts[1]` must be a string or a Document, got dict"
    )
    assert problems[3] == f"{path}, row 4 (line 5): 1 more cells than columns"


def test_dataframe_with_lists_arrays_nan_and_json_strings() -> None:
    frame = pd.DataFrame(
        {
            "user_input": ["q1", "q2", "q3"],
            "retrieved_contexts": [["a", "b"], np.array(["c"]), '["d", "e"]'],
            "reference": ["r1", np.nan, None],
            "score_hint": [1, 2, 3],
        },
        index=["x", "y", "z"],
    )
    samples = load_dataset(frame)
    assert [s.contexts for s in samples] == [["a", "b"], ["c"], ["d", "e"]]
    assert [s.reference for s in samples] == ["r1", None, None]
    assert [s.metadata["score_hint"] for s in samples] == [1, 2, 3]
    assert type(samples[0].metadata["score_hint"]) is int


def test_dataframe_errors_name_the_index_label() -> None:
    frame = pd.DataFrame({"question": ["q1", "q2"], "contexts": [["ok"], "[broken"]})
    frame.index = pd.Index(["first", "second"])
    with pytest.raises(DatasetError) as info:
        load_dataset(frame)
    (problem,) = info.value.problems
    assert str(problem).startswith(
        "DataFrame, row 2 (index 'second'), field `contexts`: must be a JSON list"
    )


def test_in_memory_rows_name_the_index() -> None:
    with pytest.raises(DatasetError) as info:
        load_dataset([{"question": "q", "contexts": ["c"]}, "not a row", {"contexts": 3}])
    assert [str(p) for p in info.value.problems] == [
        "dataset, row 2 (index 1): expected an object (a dict), got str",
        "dataset, row 3 (index 2), field `contexts`: "
        "`contexts` must be a list of strings or Documents, got int",
    ]


def test_file_problems(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="dataset file not found") as info:
        load_dataset(missing)
    assert info.value.filename == str(missing)
    with pytest.raises(DatasetError, match="is a directory"):
        load_dataset(tmp_path)
    other = tmp_path / "data.parquet"
    other.write_bytes(b"PAR1")
    with pytest.raises(DatasetError, match=r"unsupported file type '\.parquet'; use one of"):
        load_dataset(other)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(DatasetError, match="the dataset has no rows"):
        load_dataset(empty)
    latin = tmp_path / "latin.csv"
    latin.write_bytes("question\ncaf\xe9\n".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"latin\.csv: not valid UTF-8"):
        load_dataset(latin)


def test_unsupported_sources() -> None:
    with pytest.raises(DatasetError, match="cannot read a dataset from int"):
        load_dataset(42)  # type: ignore[arg-type]
    with pytest.raises(DatasetError, match="the dataset has no rows"):
        load_dataset([])


def test_line_separators_inside_text_stay_in_their_row(tmp_path: Path) -> None:
    """U+2028, U+2029 and U+0085 are left raw by JSON writers (``ensure_ascii=False``) and
    unquoted in CSV cells: before, splitting lines cut a row in two there."""
    text = "Who wrote\u2028it\u2029and\x85when?"
    jsonl = tmp_path / "d.jsonl"
    rows = [{"question": text, "contexts": ["c\u2028d"]}, {"question": "q2", "contexts": ["x"]}]
    jsonl.write_text("\n".join(json.dumps(r, ensure_ascii=False) for r in rows), encoding="utf-8")
    assert [s.question for s in load_dataset(jsonl)] == [text, "q2"]
    csv_file = tmp_path / "d.csv"
    csv_file.write_text(
        f'question,contexts,reference\n{text},"[""Einstein.""]",Einstein\n', encoding="utf-8"
    )
    (sample,) = load_dataset(csv_file)
    assert (sample.question, sample.contexts, sample.reference) == (text, ["Einstein."], "Einstein")


def test_a_csv_column_named_twice_is_refused(tmp_path: Path) -> None:
    """Before, the last of the two silently won."""
    path = tmp_path / "dup.csv"
    path.write_text('question,contexts,contexts\nq,"[""A""]","[""B""]"\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"dup\.csv: the column 'contexts' appears twice"):
        load_dataset(path)
