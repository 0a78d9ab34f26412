"""Open a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`, `mysql://...`, `redis://...`.

Query parameters the store itself reads (and removes before the URL reaches the
driver): `table_prefix=` and `auto_migrate=` for SQL, `key_prefix=` for Redis, and the
timeouts in seconds, `connect_timeout=` (default 10), `statement_timeout=` (30: one call's
statements and commit) and, for SQL, `pool_timeout=` (10: waiting for a pooled connection),
e.g. `postgresql://app@db/agents?connect_timeout=3&statement_timeout=5`. A call past its
bound raises `StoreError`.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from contextkeep._errors import ConfigError
from contextkeep.stores._timeouts import Timeouts
from contextkeep.stores.base import MigratableStore, Store

__all__ = ["SCHEMES", "default_store_url", "migrate", "open_store"]

# scheme -> (backend, driver module, extra that installs it; "" for a core dependency)
_BACKENDS: dict[str, tuple[str, str, str]] = {
    "memory": ("memory", "", ""),
    "sqlite": ("sql", "aiosqlite", ""),
    "sqlite+aiosqlite": ("sql", "aiosqlite", ""),
    "postgresql": ("sql", "psycopg", "postgres"),
    "postgres": ("sql", "psycopg", "postgres"),
    "postgresql+psycopg": ("sql", "psycopg", "postgres"),
    "mysql": ("sql", "aiomysql", "mysql"),
    "mariadb": ("sql", "aiomysql", "mysql"),
    "mysql+aiomysql": ("sql", "aiomysql", "mysql"),
    "redis": ("redis", "redis", "redis"),
    "rediss": ("redis", "redis", "redis"),
    "unix": ("redis", "redis", "redis"),
}
SCHEMES = tuple(_BACKENDS)
"""Every URL scheme :func:`open_store` accepts."""

_PARAMS = {
    "memory": set[str](),
    "sql": {"table_prefix", "auto_migrate", "connect_timeout", "statement_timeout", "pool_timeout"},
    "redis": {"key_prefix", "connect_timeout", "statement_timeout"},
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def default_store_url() -> str:
    """The embedded default: `sqlite:///{data_dir}/contextkeep.db`.

    `data_dir` is `$CONTEXTKEEP_HOME`, else `./.contextkeep` (made absolute, so
    the URL does not change meaning when the working directory does).
    """
    data_dir = Path(os.environ.get("CONTEXTKEEP_HOME") or ".contextkeep").expanduser().resolve()
    return f"sqlite:///{data_dir / 'contextkeep.db'}"


def open_store(url: str) -> Store:
    """A store for `url`; nothing connects until the first call.

    Raises :class:`ConfigError` (key `store`) for an unknown scheme or parameter,
    and names the extra to install when the driver package is missing.
    """
    scheme = urlsplit(url).scheme.lower()
    if scheme not in _BACKENDS:
        raise ConfigError(
            "store", f"unknown scheme in {url!r}; accepted: {', '.join(s + '://' for s in SCHEMES)}"
        )
    backend, module, extra = _BACKENDS[scheme]
    if module and importlib.util.find_spec(module) is None:
        fix = f"pip install 'contextkeep[{extra}]'" if extra else "reinstall contextkeep"
        raise ConfigError("store", f"{scheme}:// needs the {module!r} package: {fix}")
    base, _, raw_query = url.partition("?")
    query = parse_qsl(raw_query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _PARAMS["sql"] | _PARAMS["redis"]}
    unexpected = set(ours) - _PARAMS[backend]
    if unexpected:
        raise ConfigError("store", f"{scheme}:// does not take {', '.join(sorted(unexpected))}")
    passed = urlencode([(k, v) for k, v in query if k not in ours])  # driver options (sslmode=...)
    rest = f"{base}?{passed}" if passed else base
    if backend == "memory":
        from contextkeep.stores.memory import MemoryStore

        return MemoryStore()
    timeouts = Timeouts.from_query(ours)
    if backend == "redis":
        from contextkeep.stores.redis import DEFAULT_KEY_PREFIX, RedisStore

        return RedisStore(
            rest,
            key_prefix=ours.get("key_prefix", DEFAULT_KEY_PREFIX),
            connect_timeout=timeouts.connect,
            statement_timeout=timeouts.statement,
        )
    from contextkeep.stores.sql import DEFAULT_TABLE_PREFIX, SQLStore

    return SQLStore(
        rest,
        table_prefix=ours.get("table_prefix", DEFAULT_TABLE_PREFIX),
        auto_migrate=_flag(ours.get("auto_migrate", "true")),
        connect_timeout=timeouts.connect,
        statement_timeout=timeouts.statement,
        pool_timeout=timeouts.pool,
    )


async def migrate(url: str) -> int:
    """Create or upgrade the schema of the store at `url`; the schema version reached.

    What `contextkeep migrate --store URL` runs. A memory store has no schema (0).
    """
    store = open_store(url)
    try:
        return await store.migrate() if isinstance(store, MigratableStore) else 0
    finally:
        await store.close()


def _flag(value: str) -> bool:
    lowered = value.lower()
    if lowered in _TRUE | _FALSE:
        return lowered in _TRUE
    raise ConfigError("store", f"auto_migrate={value!r} is not a boolean (true/false)")
