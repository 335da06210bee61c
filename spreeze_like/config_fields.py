"""Config fields as data: their types, the JSON and command-line coercion, and the one-line parser.

Shared by :class:`spreeze_like.config.TrainConfig` (``from_dict``, ``from_json_file``) and by
:mod:`spreeze_like.flags`, which builds the command line from the dataclass's fields. Every problem
is a one-line :class:`~spreeze_like.errors.ConfigError` (or argparse's ``error: ...``, exit 2).
"""

from __future__ import annotations

import argparse
import difflib
import json
import types
import typing
from pathlib import Path
from typing import Any

from spreeze_like.errors import ConfigError

SOURCES_KEY = "sources"  # config.json's map of each field to where its value came from (layering.py)


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """``Optional[X]`` -> (X, True); anything else -> (tp, False)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return args[0], True
    return tp, False


def typed_value(tp: Any, value: Any) -> tuple[bool, Any]:
    """Whether ``value`` (from JSON or TOML) is of the field type ``tp``, and the value as the field holds it.

    ``tp`` is bool, int, float, str, a tuple of whole numbers (``tuple`` or ``tuple[int, ...]``:
    a JSON or TOML array), or a dict (a JSON object or TOML table). A bool is not a number here, an int
    is a float (converted), and an array becomes a tuple. Any other type is taken as it is (the config's own
    checks follow).
    """
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return ok, float(value) if ok else value
    if tp is str:
        return isinstance(value, str), value
    if tp is dict or typing.get_origin(tp) is dict:  # a JSON object or TOML table (keys checked by validate())
        return isinstance(value, dict), value
    if tp is tuple or typing.get_origin(tp) is tuple:
        ok = isinstance(value, (list, tuple)) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        return ok, tuple(value) if ok else value
    return True, value


def _coerce(name: str, tp: Any, value: Any, source: str) -> Any:
    base, optional = unwrap_optional(tp)
    if value is None and optional:
        return None
    ok, value = typed_value(base, value)
    if not ok:
        raise ConfigError(
            f"{source}: {name} = {value!r} has the wrong type; expected {getattr(base, '__name__', base)}"
        )
    return value


def coerce_fields(cls: type, data: dict[str, Any], source: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a JSON object of settings")
    hints = field_types(cls)
    unknown = sorted(set(data) - set(hints))
    if unknown:
        raise ConfigError(f"{source}: unknown setting(s) {', '.join(unknown)}; see python -m spreeze_like.run --help")
    return {k: _coerce(k, hints[k], v, source) for k, v in data.items()}


def settings_of(data: Any) -> Any:
    """A config dict without config.json's ``sources`` map (anything else is passed through to be checked)."""
    return {k: v for k, v in data.items() if k != SOURCES_KEY} if isinstance(data, dict) else data


def load_json_file(path: str | Path) -> dict[str, Any]:
    """Read a JSON config file; any problem is a one-line ConfigError."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}; give --config the path of a JSON "
                          "file of settings (a run's config.json works)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid JSON (line {exc.lineno}: {exc.msg})") from None


def json_object(text: str) -> dict[str, Any]:
    """A flag's value that is a JSON object (``--env-kwargs '{"ctrl_cost_weight": 0.05}'``); argparse turns
    the ArgumentTypeError into its one ``error:`` line."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not JSON ({exc.msg} at column {exc.colno}); give an object "
                                         "in single quotes, e.g. '{\"ctrl_cost_weight\": 0.05}'") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object; give one, e.g. '{{\"max_episode_steps\": "
                                         "500}'")
    return value


json_object.__name__ = "JSON object"  # argparse names the type in its fallback message


# --- the command line's error convention (spreeze_like.flags builds the parser) ----------------------
class OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one ``error: ...`` line on stderr and exits with status 2.

    An unknown ``--flag`` close to a real one is answered with it: ``--totl-steps 5``: did you mean
    ``--total-steps``? (Python 3.14's ``suggest_on_error`` does this for choices only.) Abbreviated
    flags are not accepted: ``--hidden-size 3`` would silently be ``--hidden-sizes 3`` (argparse's
    default), and a prefix that is unique today becomes ambiguous when a flag is added.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> typing.NoReturn:  # argparse's own contract
        self.exit(2, f"error: {message}{self._did_you_mean(message)} (see {self.prog} --help)\n")

    def _did_you_mean(self, message: str) -> str:
        prefix = "unrecognized arguments: "
        if not message.startswith(prefix):
            return ""
        known = [s for s in self._option_string_actions if s.startswith("--")]
        hints = []
        for token in message[len(prefix):].split():
            flag = token.split("=", 1)[0]
            close = difflib.get_close_matches(flag, known, n=1, cutoff=0.75) if flag.startswith("--") else []
            if close:
                hints.append(f"{flag}: did you mean {close[0]}?")
        return "; " + "; ".join(hints) if hints else ""
