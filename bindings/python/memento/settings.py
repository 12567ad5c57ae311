"""The runtime's settings as keywords: MEMENTO_SCHEME -> scheme, MEMENTO_TIMEOUT_S -> timeout_s."""
from . import _memento


def settings_keywords():
    """{keyword: MEMENTO_* variable} for every runtime setting."""
    return {v[len("MEMENTO_"):].lower(): v for v in _memento.config_variables()}
