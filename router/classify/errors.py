"""Errors of the classifier runtime.

Tree::

    ClassifierError                 the classifier cannot be used; the gateway routes on priors
    ├── ClassifierUnavailable       torch / transformers / peft / the base encoder not installed
    └── AdapterError                an adapter folder is missing, incomplete or inconsistent

None of them reaches a client: the gateway catches them at start-up and falls back to the
prior baseline (:class:`router.predict.PriorPredictor`), or refuses to start when the
settings say ``classifier=on``.
"""

from __future__ import annotations

#: How to install the ``classifier`` extra, for messages: torch pinned to the version checked
#: (its CPU build), from the registry or from a checkout (the README's form).
INSTALL_CLASSIFIER = ("pip install torch==2.13.0 'mixroute[classifier]' "
                      "(from a checkout: pip install torch==2.13.0 -e '.[classifier]')")


class ClassifierError(Exception):
    """Base error of :mod:`router.classify`; ``code`` is stable for logs."""

    code = "classifier_error"


class ClassifierUnavailable(ClassifierError):
    """An optional dependency (the ``classifier`` extra) is missing."""

    code = "classifier_unavailable"


class AdapterError(ClassifierError):
    """An adapter artifact is missing or does not match the others."""

    code = "adapter_invalid"
