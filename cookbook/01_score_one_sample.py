"""Score one RAG sample: context recall and context precision of what the retriever found.

The sample is the Einstein example of the RAGAS context-recall docs: four statements in the
reference answer, two of which the retrieved context supports, so recall is 2/4 = 0.5.

Environment:
    OPENAI_API_KEY      the judge (OPENAI_BASE_URL for a local OpenAI-compatible server
                        such as Ollama or vLLM; any key works there)

Run: python cookbook/01_score_one_sample.py
"""

from langchain_openai import ChatOpenAI

from langchain_ragmetrics import ContextPrecision, ContextRecall, RagSample

judge = ChatOpenAI(model="gpt-4o-mini", temperature=0)

sample = RagSample(
    question="What can you tell me about Albert Einstein?",
    contexts=[
        "Albert Einstein (14 March 1879 - 18 April 1955) was a German-born theoretical "
        "physicist, widely held to be one of the greatest and most influential scientists of "
        "all time. Best known for developing the theory of relativity, he also made important "
        "contributions to quantum mechanics. He received the 1921 Nobel Prize in Physics 'for "
        "his services to theoretical physics, and especially for his discovery of the law of "
        "the photoelectric effect'.",
        "Paris is the capital and most populous city of France.",
    ],
    reference=(
        "Albert Einstein born in 14 March 1879 was German-born theoretical physicist, widely "
        "held to be one of the greatest and most influential scientists of all time. He "
        "received the 1921 Nobel Prize in Physics for his services to theoretical physics. He "
        "published 4 papers in 1905. Einstein moved to Switzerland in 1895."
    ),
)

# A metric is a Runnable: invoke / ainvoke / batch work as for any LangChain component.
recall = ContextRecall(llm=judge).invoke(sample)
print(f"context_recall = {recall.score:.2f}  ({recall.reason})")
for verdict in recall.details["statements"]:
    mark = "supported" if verdict["attributed"] else "missing  "
    print(f"  {mark}  {verdict['statement']}")

precision = ContextPrecision(llm=judge).invoke(sample)
print(f"context_precision = {precision.score:.2f}  ({precision.reason})")

usage = recall.usage + precision.usage
print(
    f"judge calls: {usage.judge_calls}, tokens: {usage.input_tokens} in / {usage.output_tokens} out"
)
