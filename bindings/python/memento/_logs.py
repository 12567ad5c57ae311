"""The engine's log lines, handed to logging.getLogger("memento")."""
import logging

from . import _memento

logger = logging.getLogger("memento")
_LEVELS = {0: logging.ERROR, 1: logging.WARNING, 2: logging.INFO, 3: logging.DEBUG}


def flush_logs():
    for level, message in _memento.drain_logs():
        logger.log(_LEVELS.get(level, logging.WARNING), message)
