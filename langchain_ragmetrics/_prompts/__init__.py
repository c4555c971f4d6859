"""Judge prompts of the metrics, written for this package, with few-shot examples."""
