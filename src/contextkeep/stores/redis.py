"""The Redis store: one list per transcript, one hash per document, one key per lease.

Compare-and-set runs in Lua scripts, which Redis executes atomically:
`append` checks `LLEN == expected_length` before `RPUSH` (a retried batch found already
stored there succeeds: see `_idempotent`), `save_document`
checks the stored version before `HSET`, and `append_and_save` makes both checks before
either write. A lease is `SET key owner NX PX ttl`
(Redis expires it by its own clock); the same owner renews it by a compare in
Lua.

Keys are `{key_prefix}{<conversation id>}:...`: the braces are a cluster hash
tag, so one conversation's keys share a slot (a script may touch them together)
while conversations spread across the cluster. `}` and `%` in ids are
percent-escaped so no id can end the tag early or collide with another's keys.
The set of conversation ids lives in its own slot, so it is updated outside the
append script: *before* a transcript's first append, which means it may name a
conversation whose first append failed, never miss one; listing filters those.
The scopes saved for each conversation and document kind are a set in the
conversation's slot, added to by the save script itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from contextkeep._errors import ConfigError, SchemaVersionError, StoreError
from contextkeep._messages import Message, message_from_dict, message_json
from contextkeep.stores._idempotent import already_stored
from contextkeep.stores._timeouts import DEFAULT_TIMEOUTS
from contextkeep.stores.base import Document, DocumentWrite

__all__ = ["DEFAULT_KEY_PREFIX", "SCHEMA_VERSION", "RedisStore"]

_log = logging.getLogger("contextkeep.stores")

DEFAULT_KEY_PREFIX = "ck:"
"""Prefix of every key unless configured otherwise."""

SCHEMA_VERSION = 2
"""Layout version of the keys below, stored under `{key_prefix}schema_version`.

1: transcripts, documents, leases, the conversation set. 2: adds the scope sets (`list_scopes`);
a layout-1 store is upgraded on first use by indexing the documents it holds."""

# Lua caps the values one unpack() may spread, so long appends push in chunks.
_APPEND = """
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
for i = 2, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return 1
"""

_SAVE_DOCUMENT = """
local stored = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if stored ~= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', stored + 1, 'data', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
"""

# KEYS: the transcript, the document, its scope set; ARGV: expected length, expected version,
# data, scope, then the messages. Both checks pass before anything is written.
_APPEND_AND_SAVE = """
if redis.call('LLEN', KEYS[1]) ~= tonumber(ARGV[1]) then return 0 end
local stored = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if stored ~= tonumber(ARGV[2]) then return 0 end
for i = 5, #ARGV, 1000 do
  redis.call('RPUSH', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[2], 'version', stored + 1, 'data', ARGV[3])
redis.call('SADD', KEYS[3], ARGV[4])
return 1
"""

_ACQUIRE_LEASE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_RELEASE_LEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class RedisStore:
    """A :class:`~contextkeep.stores.base.Store` in Redis (one server; keys are cluster-ready).

    Pass a `redis://` URL or a ready `redis.asyncio.Redis` client (the store then
    closes it on :meth:`close` all the same).

    Every call is bounded (seconds; URL parameters of the same names through
    :func:`~contextkeep.stores.open_store`): `connect_timeout` to open a connection and
    `statement_timeout` for the whole call, redis-py's own reconnects included. Past it the
    call raises `StoreError`; the pool opens fresh connections once the server answers again.
    """

    def __init__(
        self,
        url_or_client: str | Redis,
        *,
        key_prefix: str = DEFAULT_KEY_PREFIX,
        connect_timeout: float = DEFAULT_TIMEOUTS.connect,
        statement_timeout: float = DEFAULT_TIMEOUTS.statement,
    ) -> None:
        if "{" in key_prefix or "}" in key_prefix:
            raise ConfigError("store.key_prefix", f"{key_prefix!r} must not contain braces (hash tags)")
        self._statement_timeout = statement_timeout
        if isinstance(url_or_client, str):
            self._client: Redis = Redis.from_url(
                url_or_client, socket_connect_timeout=connect_timeout, socket_timeout=statement_timeout
            )
            where = self._client.connection_pool.connection_kwargs
            self._display = f"{where.get('host', '?')}:{where.get('port', '?')}/{where.get('db', 0)}"
        else:
            self._client = url_or_client
            self._display = "redis"
        self._prefix = key_prefix
        self._append = self._client.register_script(_APPEND)
        self._save_document = self._client.register_script(_SAVE_DOCUMENT)
        self._append_and_save = self._client.register_script(_APPEND_AND_SAVE)
        self._acquire_lease = self._client.register_script(_ACQUIRE_LEASE)
        self._release_lease = self._client.register_script(_RELEASE_LEASE)
        self._checked = False

    @property
    def client(self) -> Redis:
        """The redis-py client (for tools and tests)."""
        return self._client

    @property
    def backend(self) -> str:
        """`redis` (labels failed saves)."""
        return "redis"

    @property
    def key_prefix(self) -> str:
        """The prefix of this store's keys."""
        return self._prefix

    def __repr__(self) -> str:
        return f"RedisStore({self._display!r}, key_prefix={self._prefix!r})"

    # -- keys -----------------------------------------------------------------------------

    def _key(self, conversation_id: str, suffix: str) -> str:
        tag = conversation_id.replace("%", "%25").replace("}", "%7D")
        return f"{self._prefix}{{{tag}}}:{suffix}"

    def _document_key(self, conversation_id: str, kind: str, scope: str) -> str:
        return self._key(conversation_id, "doc:" + _dumps([kind, scope]))

    def _scopes_key(self, conversation_id: str, kind: str) -> str:
        return self._key(conversation_id, "scopes:" + _dumps(kind))

    @property
    def _conversations_key(self) -> str:
        return f"{self._prefix}conversations"

    @property
    def _version_key(self) -> str:
        return f"{self._prefix}schema_version"

    # -- protocol -------------------------------------------------------------------------

    async def append(
        self, conversation_id: str, messages: Sequence[Message], *, expected_length: int
    ) -> bool:
        """Append `messages` if exactly `expected_length` are stored; `False` (nothing written) otherwise."""
        bodies = [message_json(m) for m in messages]
        async with self._errors("append"):
            if expected_length == 0 and bodies:
                await self._client.sadd(self._conversations_key, conversation_id)
            key = self._key(conversation_id, "messages")
            won = await self._append(keys=[key], args=[expected_length, *bodies])
        if won:
            return True
        # A lost reply (redis-py resends the script after a dropped connection) may hide our own win.
        return await already_stored(self, conversation_id, messages, expected_length)

    async def append_and_save(
        self,
        conversation_id: str,
        messages: Sequence[Message],
        *,
        expected_length: int,
        document: DocumentWrite,
    ) -> bool:
        """`append` and `save_document(document)` in one script: both, or neither and `False`."""
        bodies = [message_json(m) for m in messages]
        d = document
        async with self._errors("append_and_save"):
            if expected_length == 0 and bodies:
                await self._client.sadd(self._conversations_key, conversation_id)
            keys = [
                self._key(conversation_id, "messages"),
                self._document_key(conversation_id, d.kind, d.scope),
                self._scopes_key(conversation_id, d.kind),
            ]
            args: list[str | int] = [expected_length, d.expected_version, _dumps(dict(d.data)), d.scope]
            args += bodies
            return bool(await self._append_and_save(keys=keys, args=args))

    async def load_messages(
        self, conversation_id: str, *, after: int = 0, limit: int | None = None
    ) -> list[Message]:
        """Messages from position `after` on (at most `limit`), in order."""
        if limit is not None and limit <= 0:
            return []
        stop = -1 if limit is None else after + limit - 1
        async with self._errors("load_messages"):
            key = self._key(conversation_id, "messages")
            bodies = await self._client.lrange(key, max(after, 0), stop)
        return [message_from_dict(json.loads(body)) for body in bodies]

    async def count_messages(self, conversation_id: str) -> int:
        """How many messages the transcript holds."""
        async with self._errors("count_messages"):
            return int(await self._client.llen(self._key(conversation_id, "messages")))

    async def load_document(self, conversation_id: str, kind: str, scope: str = "") -> Document:
        """The document, or an empty one with version 0."""
        async with self._errors("load_document"):
            key = self._document_key(conversation_id, kind, scope)
            version, data = await self._client.hmget(key, ["version", "data"])
        if version is None or data is None:
            return Document({}, 0)
        return Document(json.loads(data), int(version))

    async def save_document(
        self,
        conversation_id: str,
        kind: str,
        data: Mapping[str, Any],
        *,
        expected_version: int,
        scope: str = "",
    ) -> bool:
        """Save as version `expected_version + 1` if the stored one is `expected_version`, else `False`."""
        body = _dumps(dict(data))
        async with self._errors("save_document"):
            keys = [self._document_key(conversation_id, kind, scope), self._scopes_key(conversation_id, kind)]
            won = await self._save_document(keys=keys, args=[expected_version, body, scope])
        return bool(won)

    async def list_scopes(self, conversation_id: str, kind: str) -> list[str]:
        """The scopes holding a saved document of `kind` for the conversation, sorted."""
        async with self._errors("list_scopes"):
            members = await self._client.smembers(self._scopes_key(conversation_id, kind))
        return sorted(map(_text, members))

    async def acquire_lease(self, conversation_id: str, name: str, owner: str, ttl_ms: int) -> bool:
        """Take (or renew, for the same owner) a lease; an expired lease is taken over."""
        async with self._errors("acquire_lease"):
            key = self._key(conversation_id, "lease:" + name)
            won = await self._acquire_lease(keys=[key], args=[owner, max(int(ttl_ms), 1)])
        return bool(won)

    async def release_lease(self, conversation_id: str, name: str, owner: str) -> None:
        """Give a lease back (only its owner can)."""
        async with self._errors("release_lease"):
            await self._release_lease(keys=[self._key(conversation_id, "lease:" + name)], args=[owner])

    async def list_conversations(self) -> list[str]:
        """Every conversation id with a transcript."""
        async with self._errors("list_conversations"):
            members = await self._client.smembers(self._conversations_key)
            ids = sorted(map(_text, members))
            async with self._client.pipeline(transaction=False) as pipe:
                for conversation_id in ids:
                    pipe.exists(self._key(conversation_id, "messages"))
                present = await pipe.execute()
        return [conversation_id for conversation_id, found in zip(ids, present, strict=True) if found]

    async def close(self) -> None:
        """Release connections."""
        await self._client.aclose()

    # -- schema ---------------------------------------------------------------------------

    async def migrate(self) -> int:
        """Record, check or upgrade the key layout version; the version reached."""
        async with self._errors("migrate", check=False):
            await self._check_version()
        return SCHEMA_VERSION

    async def delete_keys(self) -> None:
        """Delete every key under this store's prefix (tests, benchmarks, resets)."""
        async with self._errors("delete_keys", check=False):
            async for batch in self._scan_batches():
                await self._client.delete(*batch)
        self._checked = False

    async def _scan_batches(self) -> AsyncIterator[list[Any]]:
        batch: list[Any] = []
        async for key in self._client.scan_iter(match=_glob_escape(self._prefix) + "*", count=500):
            batch.append(key)
            if len(batch) == 500:
                yield batch
                batch = []
        if batch:
            yield batch

    @asynccontextmanager
    async def _errors(self, op: str, *, check: bool = True) -> AsyncIterator[None]:
        """Check the layout version once, and turn redis-py failures into StoreError."""
        try:
            # redis-py disconnects a connection whose command is cancelled, so no reply is misread.
            async with asyncio.timeout(self._statement_timeout):
                if check and not self._checked:
                    await self._check_version()
                yield
        except TimeoutError as exc:
            raise StoreError(
                f"{op} on {self!r} timed out: no answer within {self._statement_timeout:g} s"
            ) from exc
        except (RedisError, OSError) as exc:
            raise StoreError(f"{op} failed on {self!r}: {exc!r}") from exc

    async def _check_version(self) -> None:
        # SET NX records the layout on first use; a newer layout (written by a newer
        # contextkeep) must not be read or written by this code.
        await self._client.set(self._version_key, SCHEMA_VERSION, nx=True)
        found = int(await self._client.get(self._version_key) or SCHEMA_VERSION)
        if found > SCHEMA_VERSION:
            raise SchemaVersionError(
                f"Redis store {self._display} (key prefix {self._prefix!r}) has layout version {found}, "
                f"newer than this contextkeep knows ({SCHEMA_VERSION}): upgrade contextkeep here; "
                "`contextkeep migrate --store URL` only upgrades older layouts"
            )
        if found < 2:
            await self._index_scopes()
            await self._client.set(self._version_key, SCHEMA_VERSION)
        self._checked = True

    async def _index_scopes(self) -> None:
        """Layout 1 to 2: add every stored document's scope to its set (idempotent, so racing is harmless)."""
        marker = "}:doc:"
        pattern = _glob_escape(self._prefix) + "{*" + marker + "*"
        async for key in self._client.scan_iter(match=pattern, count=500):
            text = _text(key)
            tag, _, body = text[len(self._prefix) + 1 :].partition(marker)  # a tag holds no "}"
            kind, scope = json.loads(body)
            conversation_id = tag.replace("%7D", "}").replace("%25", "%")
            await self._client.sadd(self._scopes_key(conversation_id, kind), scope)


def _text(value: Any) -> str:
    """A reply value as text (redis-py returns bytes unless the client decodes responses)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _glob_escape(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
