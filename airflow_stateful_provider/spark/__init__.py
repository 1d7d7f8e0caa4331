"""spark-submit applications of the provider."""
