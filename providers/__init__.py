"""Clients of the models linecite calls: embedders (the built-in USE v3, Ollama,
OpenAI-compatible, Gemini) and chat LLMs (Anthropic, OpenAI-compatible, Ollama), each speaking
its API's wire format, with keys from the environment and one error mapping.

May import: common/ only.
"""
