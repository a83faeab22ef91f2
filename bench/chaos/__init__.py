"""Chaos run: thousands of tool calls while workers die, the broker drops every connection and
the database goes away, then a check that nothing was lost, applied twice or posted twice.

`python -m bench.chaos` (`make chaos`) makes a database and a broker virtual host of its own,
seeds a world of servers, personas, people and memories, and publishes random tool calls (both
scopes, creations, updates and deletes, invalid arguments, ids out of reach or missing, copies
of the same tool call) at a steady pace to two real `ltm worker` processes. Meanwhile it
SIGKILLs workers (sometimes bringing one back with a failpoint that kills it between commit
and ack), closes every broker connection of its virtual host, stalls the workers' network
path to the broker (a TCP proxy) until their heartbeats give it up, and restarts the
PostgreSQL instance the run started for its database, once (never the machine's own server).
An in-process
gateway consumes the shard queues and posts embeds to a fake Discord. Afterwards it replays
whatever was dead-lettered and checks:

- every call got its result (a `…_db_error` answer counts until the dead-lettered call is
  replayed; then its recorded result is expected);
- every answer agrees with the recorded result, and is one the call could get;
- every successful call has exactly one revision, every failed one none;
- each memory's revisions form a chain (each `content_before` is the previous
  `content_after`, the first is the seeded content, the last is what the table holds);
- a model that applies the successful calls' sanitized content in revision order, from the
  seeded contents, and adds the memories the creations saved, predicts the table exactly;
- a memory the create tool saved begins its chain with its `created` revision, and no other
  memory has one;
- replayed in revision order, no scope ever holds more memories than its limit after a
  creation, nor two that say the same; a duplicate answer names a memory of the scope that
  says it, a limit answer a full scope;
- the gateway posted each successful call's embed exactly once, and nothing else;
- the workers logged no error but the ones a broker closure brings (and a call the database
  outlived the retry budget for), and nothing that is not a JSON log line (a traceback).

`bench.chaos.runner.run_chaos` is the same run as a function, which the test suite calls with a
few hundred calls (`tests/e2e/test_chaos.py`). The modules: `world` (what is seeded), `plan`
(the calls), `faults` (what breaks, and when), `workers`, `broker` (the run's own connection),
`gateway`, `settle`, `checks` (the invariants), `report` (counts and printing), `runner`.
"""

__all__: list[str] = []
