"""The engine: one turn, the open exchanges, the reflections, the memory commands, and the
facade (Engine) the front ends call. Everything the facade exports is exported here.
"""

from bot.engine import facade as _facade
from bot.engine.facade import *  # noqa: F403  (the facade's __all__ is the package's)

__all__ = _facade.__all__
