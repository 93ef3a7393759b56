"""The ``hosted`` backend: any provider litellm supports (OpenAI, Anthropic, Bedrock, ...)."""
