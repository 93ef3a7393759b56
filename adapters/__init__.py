"""Trained classifier heads that ship with mixroute: one folder per head (``quality``,
``output_length``, ``domain``, ``difficulty``, ``pii``, ``injection``), each with
``config.json``, peft ``adapter_config.json`` / ``adapter_model.safetensors``,
``head.safetensors`` and ``MODEL_CARD.md``. Format: :mod:`router.classify.heads`;
loading: :func:`router.classify.load_predictor`; training: ``mixroute train``.
"""
