"""Training of small LMs for specjax (tokenizer + causal-LM training loop)."""
