"""llmgw: a self-hosted LLM gateway with its own control plane."""

__version__ = "0.1.0"
