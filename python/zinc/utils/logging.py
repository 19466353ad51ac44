"""zinc.utils.logger and log_dist — DeepSpeed's deepspeed.utils.logger (a logging.Logger that
prints INFO and above to stdout, each line prefixed with time, level and place) and
log_dist(message, ranks) (only the ranks listed print; -1 in the list: every rank). The logger
is "zinc"'s, so a script's logging configuration can find it by that name."""
import logging as _logging
import sys

_FORMAT = "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"


def _make_logger():
    log = _logging.getLogger("zinc")
    if not log.handlers:          # a second import (or a script's own handler) adds none
        h = _logging.StreamHandler(stream=sys.stdout)
        h.setFormatter(_logging.Formatter(_FORMAT))
        log.addHandler(h)
        log.setLevel(_logging.INFO)
        log.propagate = False
    return log


logger = _make_logger()


def _rank():
    from .. import comm
    return comm.get_rank()


def log_dist(message, ranks=None, level=_logging.INFO):
    """Logs `message` on the ranks listed (None or [-1]: every rank), prefixed with the rank."""
    rank = _rank()
    if ranks is None or -1 in ranks or rank in ranks:
        logger.log(level, f"[Rank {rank}] {message}")


def set_log_level_from_string(level):
    """DeepSpeed's: 'debug', 'info', 'warning', 'error' or 'critical' for the logger."""
    value = getattr(_logging, str(level).upper(), None)
    if not isinstance(value, int):
        raise ValueError(f"zinc.utils.set_log_level_from_string: {level!r} is not a log level "
                         "(debug, info, warning, error, critical)")
    logger.setLevel(value)
