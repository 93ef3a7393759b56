"""mixroute router: policy, rewrite -> classify -> decide, cost model, evaluation.

Never imports FastAPI: the router is usable from the CLI, offline evaluation and tests.
"""
