"""The ``vllm`` backend: an OpenAI-compatible pool of replicas (vLLM, SGLang, TGI, ...)."""
