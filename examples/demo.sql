-- A small server to try the worker on: `make run` loads it (harmless to load again).
INSERT INTO servers (server_id, server_disc_id) VALUES (900001, '111111111111111111')
    ON CONFLICT DO NOTHING;
INSERT INTO personas (persona_id, server_id, persona_lineage_id, nickname)
    VALUES (900001, 900001, 7, 'Tomori') ON CONFLICT DO NOTHING;
INSERT INTO users (user_id, user_disc_id, user_nickname) VALUES
    (900001, '222222222222222222', NULL),
    (900002, '333333333333333333', 'Ali')
    ON CONFLICT DO NOTHING;
INSERT INTO guild_members (server_id, user_disc_id, display_name, global_name, username) VALUES
    (900001, '222222222222222222', 'Bob', 'Bobby', 'bob'),
    (900001, '333333333333333333', 'Alice', NULL, 'alice')
    ON CONFLICT DO NOTHING;
INSERT INTO server_memories (server_memory_id, server_id, persona_id, persona_lineage_id, content)
    VALUES (24, 900001, 900001, 7, 'The server''s movie night is on Fridays.')
    ON CONFLICT DO NOTHING;
INSERT INTO personal_memories (personal_memory_id, user_id, persona_lineage_id, content)
    VALUES (25, 900002, 7, '{user} is learning the violin.')
    ON CONFLICT DO NOTHING;
-- Keep the shared id sequence ahead of the ids above.
SELECT setval('memory_id_seq', greatest((SELECT last_value FROM memory_id_seq), 1000));
