"""Configuration: the library's string key/value options (``outbox_config_set``)."""

from __future__ import annotations

import functools
from typing import Any, Dict, Iterator, List, Mapping, MutableMapping, Optional, Tuple, Union

from . import _native
from ._errors import ArgumentTypeError

def _text(key: str, value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float, str)):
        return str(value)
    if isinstance(value, Mapping) and key == "event.type_map":
        return ",".join(f"{k}={v}" for k, v in value.items())
    raise ArgumentTypeError(f"configuration value for {key!r} must be a str, int, float or bool, not {type(value).__name__}")

class Config(MutableMapping[str, str]):
    """The library's options by key (``outbox.config_keys()``), validated as they are set (UnknownKey,
    InvalidArgument): str, int, float or bool values, a dict for ``event.type_map``. Reading gives the
    current value (secrets as ``"***"``); iterating, the keys set here. ``config=`` takes a Config, a
    mapping or None (the defaults): ``outbox.Config({"outbox.schema": "shop"})``."""
    __slots__ = ("_values", "native", "_env", "_derived")

    def __init__(self, options: Optional[Mapping[str, Any]] = None, /, **_: Any) -> None:
        if _:
            raise ArgumentTypeError("Config() takes a mapping of dotted keys, e.g. Config({'outbox.schema': 'shop'})")
        self._values: Dict[str, str] = {}
        self.native = _native.Config()  #: the library's configuration handle
        self._env = False
        self._derived: Dict[str, _native.Config] = {}  # by placeholder style (native_config), dropped on a change
        for k, v in (options or {}).items():
            self[k] = v

    def __setitem__(self, key: str, value: Any) -> None:
        text = _text(key, value)
        self.native.set(key, text)
        self._values[key] = text
        self._derived.clear()

    def __getitem__(self, key: str) -> str:
        return str(self.native.get(key))

    def __delitem__(self, key: str) -> None:
        del self._values[key]  # back to the default: rebuilt from the remaining values (and the environment)
        self.native = self.copy().native
        self._derived.clear()

    def __contains__(self, key: object) -> bool:
        return key in self._values
    def __iter__(self) -> Iterator[str]:
        return iter(self._values)
    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:  # which keys are secret is core's rule: they read back as "***"
        return f"outbox.Config({ {k: str(self.native.get(k)) for k in self._values}!r})"

    def copy(self) -> "Config":
        c = Config(self._values)
        if self._env:
            c.apply_env()
        return c

    def apply_env(self) -> None:
        """Fills pg.url / amqp.url not set here from OUTBOX_PG_URL / OUTBOX_AMQP_URL
        (``outbox_config_from_env``); copies do the same."""
        self.native.from_env(False)
        self._env = True
        self._derived.clear()

ConfigLike = Union[Config, Mapping[str, Any], None]
_DEFAULTS = Config()
_shared = functools.lru_cache(32)(lambda items: Config(dict(items)))  # a mapping's, by its items: never handed out

def as_config(config: ConfigLike, shared: bool = False) -> Optional[Config]:  # shared: see _shared
    if config is None or isinstance(config, Config):
        return config
    if isinstance(config, Mapping):
        return _shared(tuple((k, _text(k, v)) for k, v in config.items())) if shared else Config(config)
    raise ArgumentTypeError(f"config must be an outbox.Config, a mapping or None, not {type(config).__name__}")

def native_config(config: ConfigLike, placeholders: Optional[str] = None) -> Optional["_native.Config"]:
    """The native configuration, with ``render.placeholders`` set to ``placeholders`` when given
    (derived once per configuration and style)."""
    c = as_config(config, True)
    if placeholders is None:
        return c.native if c is not None else None
    c = c if c is not None else _DEFAULTS
    n = c._derived.get(placeholders)
    if n is None:
        d = c.copy()
        d["render.placeholders"] = placeholders
        n = c._derived[placeholders] = d.native
    return n

def with_urls(config: ConfigLike, pg_url: Optional[str], amqp_url: Optional[str]) -> Config:
    """A copy of ``config`` with pg.url / amqp.url from the arguments, else the configuration,
    else OUTBOX_PG_URL / OUTBOX_AMQP_URL."""
    c = as_config(config)
    c = c.copy() if c is not None else Config()
    for key, url in (("pg.url", pg_url), ("amqp.url", amqp_url)):
        if url:
            c[key] = url
    c.apply_env()
    return c

def config_keys() -> List[Tuple[str, str]]:
    """Every configuration key the library knows, with its help text (defaults included)."""
    return [(str(k), str(h)) for k, h in _native.Config.keys()]
