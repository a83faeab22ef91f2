-- A small server to try the worker on. `make run` loads it on every run, and each load puts
-- the demo back as the README shows it: memory ID:24 of the server and ID:25, Alice's
-- personal memory, as first written, with no revisions, no other memory of the demo server
-- or its two people (what the create examples saved), and no idempotency record of the
-- example calls (`demo-call-…`), which would otherwise answer their old result and change
-- nothing. Only the demo's own rows are touched: a memory 24 or 25 of another server or
-- user stays as it is.
BEGIN;

INSERT INTO servers (server_id, server_disc_id) VALUES (900001, '111111111111111111')
    ON CONFLICT DO NOTHING;
DELETE FROM server_configs WHERE server_id = 900001;  -- the defaults: everything allowed
DELETE FROM personalization_blacklist WHERE server_id = 900001;

INSERT INTO personas (persona_id, server_id, persona_lineage_id, nickname)
    VALUES (900001, 900001, 7, 'Tomori')
    ON CONFLICT (persona_id) DO UPDATE
    SET persona_lineage_id = EXCLUDED.persona_lineage_id, nickname = EXCLUDED.nickname
    WHERE personas.server_id = EXCLUDED.server_id;

INSERT INTO users (user_id, user_disc_id, user_nickname) VALUES
    (900001, '222222222222222222', NULL),
    (900002, '333333333333333333', 'Ali')
    ON CONFLICT (user_id) DO UPDATE SET user_nickname = EXCLUDED.user_nickname, privacy_level = 0
    WHERE users.user_disc_id = EXCLUDED.user_disc_id;

INSERT INTO guild_members (server_id, user_disc_id, display_name, global_name, username) VALUES
    (900001, '222222222222222222', 'Bob', 'Bobby', 'bob'),
    (900001, '333333333333333333', 'Alice', NULL, 'alice')
    ON CONFLICT (server_id, user_disc_id) DO UPDATE
    SET display_name = EXCLUDED.display_name, global_name = EXCLUDED.global_name,
        username = EXCLUDED.username, is_bot = false;

-- Re-created when a call deleted them, without revisions (their history is deleted below).
INSERT INTO server_memories (server_memory_id, server_id, persona_id, persona_lineage_id, content)
    VALUES (24, 900001, 900001, 7, 'The server''s movie night is on Fridays.')
    ON CONFLICT (server_memory_id) DO UPDATE
    SET persona_id = EXCLUDED.persona_id, persona_lineage_id = EXCLUDED.persona_lineage_id,
        user_id = NULL, content = EXCLUDED.content, tags = '{}', updated_at = now(),
        revision_id = 0
    WHERE server_memories.server_id = EXCLUDED.server_id;
INSERT INTO personal_memories (personal_memory_id, user_id, persona_lineage_id, content)
    VALUES (25, 900002, 7, '{user} is learning the violin.')
    ON CONFLICT (personal_memory_id) DO UPDATE
    SET persona_lineage_id = EXCLUDED.persona_lineage_id, content = EXCLUDED.content,
        tags = '{}', updated_at = now(), revision_id = 0
    WHERE personal_memories.user_id = EXCLUDED.user_id;

-- What the create examples saved (the demo server's memories of the persona, and Bob's and
-- Alice's personal memories, besides ID:24 and ID:25).
DELETE FROM server_memories
    WHERE server_id = 900001 AND persona_lineage_id = 7 AND server_memory_id <> 24;
DELETE FROM personal_memories
    WHERE user_id IN (900001, 900002) AND persona_lineage_id IN (7, 0)
      AND personal_memory_id <> 25;

-- The revisions are append-only (a trigger refuses deletes). The trigger is off only inside
-- this transaction, which no other session sees it in, to delete the demo memories' history:
-- every change made in the demo server (a personal memory's too names the server it was
-- made in).
ALTER TABLE memory_revisions DISABLE TRIGGER memory_revisions_append_only;
DELETE FROM memory_revisions
    WHERE server_id = 900001
       OR (memory_id = 25 AND scope = 'target_user' AND owner_user_id = 900002);
ALTER TABLE memory_revisions ENABLE TRIGGER memory_revisions_append_only;

DELETE FROM tool_call_inbox WHERE tool_call_id LIKE 'demo-call-%';

-- The shared id sequence just past every id a memory or a revision still names (at least
-- 1000), so that the README's walk-through saves ID:1001 again: an id still in use or in
-- some history is never given out twice. Revision numbers likewise.
SELECT setval('memory_id_seq', greatest(
    (SELECT max(server_memory_id) FROM server_memories),
    (SELECT max(personal_memory_id) FROM personal_memories),
    (SELECT max(memory_id) FROM memory_revisions),
    1000));
SELECT setval(pg_get_serial_sequence('memory_revisions', 'revision_id'),
              coalesce((SELECT max(revision_id) FROM memory_revisions), 0) + 1, false);

COMMIT;
