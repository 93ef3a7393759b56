"""mixroute gateway: the HTTP edge (OpenAI-compatible endpoints, errors, SSE) and the CLI.

Importing this package is cheap: FastAPI and the app are only imported by
:mod:`gateway.app`, so ``mixroute --help`` starts fast.
"""
