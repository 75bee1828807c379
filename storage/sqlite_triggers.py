"""The SQLite writer connection's TEMP tables and triggers: how one statement does a whole call.

Owns: the statements `SqliteStore` runs on its writer connection as it opens it, creating
TEMP objects that live in the connection, never in the file (another program sees the plain
schema):
- a trigger that moves `conversations.last_seq` with each inserted message (an append is one
  `INSERT ... SELECT last_seq + 1`: no `COUNT(*)`, no scan, so message 10,000 costs what
  message 10 does);
- `teammate_accept`, whose BEFORE trigger claims, creates, backfills and queues (accepting a
  delivery is one `INSERT INTO teammate_accept ... RETURNING`: `sqlite_inbox`);
- a trigger that appends an inbox item's message as it is marked delivered (delivering is one
  `UPDATE inbox`);
- `teammate_start`, whose BEFORE trigger records a run and delivers its one item (the
  runner's every answer is one `INSERT INTO teammate_start ... RETURNING`: `sqlite_runs`).

Must not: run statements itself; import `tools` or `bots`.
"""

from __future__ import annotations

LAST_SEQ_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_last_seq AFTER INSERT ON main.messages BEGIN "
    "UPDATE conversations SET last_seq = NEW.seq, updated_at = NEW.created_at "
    "WHERE id = NEW.conversation_id AND last_seq < NEW.seq; END"
)
# A message's queryable columns, from its stored JSON (as appending takes them).
_FROM_JSON = (
    "json_extract({0}, '$.role'), json_extract({0}, '$.author.id'), "
    "json_extract({0}, '$.author.name'), json_extract({0}, '$.platform_message_id')"
)
# Accepting a delivery is ONE statement, `INSERT INTO teammate_accept ... RETURNING` (one row
# per call), so a call alone is one autocommit statement and a batch of them is one statement
# too. Per row, a BEFORE trigger: a repeat (any id claimed before, by another call or an
# earlier row) is skipped whole (no row returned); else the ids are claimed, the conversation
# made if missing, the backfill stored if nothing was ever said there, the message queued, and
# the outcome noted in `teammate_accepted` for the RETURNING clause to read.
ACCEPT_SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS teammate_accept (request INTEGER, conversation_key, "
    "channel_key, title, claims, delivery_id, body, surface_ref, received_at, backfill)",
    "CREATE TEMP TABLE IF NOT EXISTS teammate_accepted "
    "(request INTEGER PRIMARY KEY, conversation_id INTEGER, created INTEGER, item_id INTEGER)",
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_accept_one BEFORE INSERT ON teammate_accept "
    "BEGIN "
    "SELECT RAISE(IGNORE) WHERE EXISTS (SELECT 1 FROM deliveries "
    "WHERE id IN (SELECT value FROM json_each(NEW.claims))); "
    "INSERT INTO deliveries (id, claimed_at) "
    "SELECT value, NEW.received_at FROM json_each(NEW.claims); "
    "INSERT INTO conversations (key, channel_key, title, created_at, updated_at) VALUES "
    "(NEW.conversation_key, NEW.channel_key, NEW.title, NEW.received_at, NEW.received_at) "
    "ON CONFLICT (key) DO NOTHING; "
    "INSERT INTO teammate_accepted (request, conversation_id, created) "
    "SELECT NEW.request, id, last_seq = 0 AND NOT EXISTS "
    "(SELECT 1 FROM inbox WHERE inbox.conversation_id = conversations.id) "
    "FROM conversations WHERE key = NEW.conversation_key; "
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) "
    f"SELECT a.conversation_id, b.key + 1, {_FROM_JSON.format('b.value')}, NULL, "
    "NEW.received_at, b.value FROM teammate_accepted a, json_each(NEW.backfill) b "
    "WHERE a.request = NEW.request AND a.created; "
    "INSERT INTO inbox (conversation_id, delivery_id, body, surface_ref, received_at) "
    "SELECT conversation_id, NEW.delivery_id, NEW.body, NEW.surface_ref, NEW.received_at "
    "FROM teammate_accepted WHERE request = NEW.request; "
    "UPDATE teammate_accepted SET item_id = last_insert_rowid() WHERE request = NEW.request; "
    "END",
    # The statement's RETURNING has read the outcome by then: nothing is kept.
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_accept_done AFTER INSERT ON teammate_accept "
    "BEGIN DELETE FROM teammate_accept WHERE rowid = NEW.rowid; "
    "DELETE FROM teammate_accepted WHERE request = NEW.request; END",
]
# Starting a run that delivers ONE inbox item (what the runner does for nearly every answer)
# is ONE statement, `INSERT INTO teammate_start ... RETURNING`: its BEFORE trigger skips the
# row whole (nothing written, no row returned) unless the item is that conversation's, else
# inserts the run, notes its id for the RETURNING clause, and delivers the item if it is
# still pending (the deliver trigger appends the message at the seq it takes).
START_SETUP = [
    "CREATE TEMP TABLE IF NOT EXISTS teammate_start (request INTEGER, conversation_id, "
    "started_at, user_id, channel_key, model, surface_ref, owner, item_id)",
    "CREATE TEMP TABLE IF NOT EXISTS teammate_started (request INTEGER PRIMARY KEY, run_id)",
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_start_one BEFORE INSERT ON teammate_start "
    "BEGIN "
    "SELECT RAISE(IGNORE) WHERE NOT EXISTS (SELECT 1 FROM inbox "
    "WHERE id = NEW.item_id AND conversation_id = NEW.conversation_id); "
    "INSERT INTO runs (conversation_id, outcome, started_at, user_id, channel_key, model, "
    "surface_ref, owner) SELECT id, 'running', NEW.started_at, NEW.user_id, "
    "COALESCE(NEW.channel_key, channel_key), NEW.model, NEW.surface_ref, NEW.owner "
    "FROM conversations WHERE id = NEW.conversation_id; "
    "INSERT INTO teammate_started (request, run_id) VALUES (NEW.request, last_insert_rowid()); "
    "UPDATE inbox SET state = 'delivered', body = NULL, settled_at = NEW.started_at, "
    "run_id = (SELECT run_id FROM teammate_started WHERE request = NEW.request), "
    "seq = (SELECT last_seq + 1 FROM conversations WHERE id = inbox.conversation_id) "
    "WHERE id = NEW.item_id AND state = 'pending'; "
    "END",
    # The statement's RETURNING has read the run by then: nothing is kept.
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_start_done AFTER INSERT ON teammate_start "
    "BEGIN DELETE FROM teammate_start WHERE rowid = NEW.rowid; "
    "DELETE FROM teammate_started WHERE request = NEW.request; END",
]
# Delivering an inbox item is marking it delivered at its seq: the message enters history in
# the same statement.
DELIVER_TRIGGER = (
    "CREATE TEMP TRIGGER IF NOT EXISTS teammate_deliver AFTER UPDATE OF state ON main.inbox "
    "WHEN OLD.state = 'pending' AND NEW.state = 'delivered' BEGIN "
    "INSERT INTO messages (conversation_id, seq, role, author_id, author_name, "
    "platform_message_id, run_id, created_at, body) VALUES (NEW.conversation_id, NEW.seq, "
    f"{_FROM_JSON.format('OLD.body')}, NEW.run_id, NEW.settled_at, OLD.body); END"
)
