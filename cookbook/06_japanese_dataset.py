"""Evaluate a Japanese dataset: the judge works in Japanese and sentences are split with pysbd.

The rows are the worked examples of a Japanese article on RAGAS context recall and context
precision: recall 1/1 = 1.0 for the 田中部長 question, and for the 岸田 question the verdicts
[0, 1, 1] give precision (0 + 1/2 + 2/3) / 2 = 0.5833.

Environment:
    OPENAI_API_KEY      the judge (OPENAI_BASE_URL for a local OpenAI-compatible server
                        such as Ollama or vLLM; any key works there)

Run: python cookbook/06_japanese_dataset.py
"""

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextPrecision, ContextRecall, ContextRelevance, evaluate

rows = [
    {
        "question": "田中部長の部署はどこですか?",
        "contexts": [
            "田中部長は2010年から営業部のトップを務めています。",
            "営業部は昨年、売上目標を20%上回りました。",
        ],
        "reference": "田中部長は営業部に所属しています。",
    },
    {
        "question": "日本の首相は誰ですか?",
        "contexts": [
            "東京は日本の首都です。",
            "岸田文雄氏は2021年10月から日本の首相を務めています。",
            "岸田首相は外交政策に力を入れています。",
        ],
        "reference": "岸田文雄氏が現在の日本の首相です。",
    },
    {
        "question": "佐藤さんはどの部署に所属していますか?",
        "contexts": ["佐藤は研究開発部のエンジニアで、最近新製品の開発を担当しています。"],
        "reference": "佐藤は研究開発部のメンバーです。",
    },
]

judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)

# language="ja": judge prompts ask for Japanese reasons, and pysbd splits Japanese sentences
# (ContextRelevance counts them). A row can also set its own "language".
result = evaluate(
    rows, [ContextRecall(), ContextPrecision(), ContextRelevance()], llm=judge, language="ja"
)
print(result)

for row in result.rows:
    precision = row.results["context_precision"]
    if precision is not None and precision.score is not None:
        print(f"{row.sample.question}  context_precision = {precision.score:.4f}")
