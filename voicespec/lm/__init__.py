"""Our codec LM and the adapters and loaders that make any causal LM a step LM for the engine."""
