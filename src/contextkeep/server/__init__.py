"""`contextkeep serve`: REST API, live events, the dashboard and an OpenAI-compatible proxy.

How events reach a browser:

* **In-process** events (from sessions this server runs, i.e. proxied conversations)
  are forwarded live: the app subscribes to its manager's :class:`~contextkeep.EventBus`
  and fans each event out to the server-sent-event streams.
* **Cross-process** changes (e.g. ``contextkeep demo`` writing to the same store) are found
  by polling the store every ``poll_interval`` seconds (0.5 by default), only while an event
  stream is open and only for the conversations streams follow (all of them in turns for the
  dashboard's stream): transcript length, the compaction state's version and records, and
  the usage document's version. When they change, the watcher synthesizes ``context.status``,
  ``model.completed`` and ``context.compression.*`` events from the persisted state (marked
  ``"synthesized": true``). Conversations this process is serving are skipped, so their
  events are not sent twice.

Requests from other sites, other `Host` names, oversized bodies and slow request heads are
refused before anything else runs (:mod:`contextkeep.server.guard`,
:mod:`contextkeep.server.connections`); the proxy's per-conversation memory is bounded
(:mod:`contextkeep.server.kept`).

```python
from contextkeep.server import ServerSettings, create_app

app = create_app(ServerSettings(store="sqlite:///agent.db", upstream="http://vllm:8000/v1"))
```
"""

from contextkeep.server.app import ServerSettings, create_app

__all__ = ["ServerSettings", "create_app"]
