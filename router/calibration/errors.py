"""Errors of calibration (:mod:`router.calibration`)::

    CalibrationError            bad input: data, route, policy file (CLI exit status 2)
    └── TargetUnreachable       no swept threshold meets the target with the confidence (exit 1)
"""

from __future__ import annotations


class CalibrationError(Exception):
    """Calibration cannot run on this input; the message names the file or route and the problem."""


class TargetUnreachable(CalibrationError):
    """No swept threshold's realised quality ratio meets the target with the stated confidence.

    Attributes:
        points: every swept threshold's outcome (:class:`router.calibration.bound.Point`),
            when the sweep ran: the curve says how far the target is.
    """

    points: list = []
