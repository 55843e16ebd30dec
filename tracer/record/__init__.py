"""Runs inside vLLM: the recorder and writer in EngineCore, the runner hook in model-runner workers."""
